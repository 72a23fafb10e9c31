"""Provisioning and post-deploy settings, shared by the offline runtime and AWS deploys.

Never packaged into Lambda (only app.py and chalicelib/ are)."""
