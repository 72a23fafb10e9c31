"""Structured JSON logs (aws-lambda-powertools Logger), one logger for the app."""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger

logger = Logger(service="timekeeper", level=os.environ.get("LOG_LEVEL", "INFO"))
