"""timekeeper: the code packaged into Lambda. Domain logic lives here; app.py only binds it."""
