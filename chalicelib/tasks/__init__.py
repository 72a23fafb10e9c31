"""Future actions from DynamoDB items: model, API, stream scheduler, interval processor, executor."""
