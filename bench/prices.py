"""AWS list prices the cost bench (P4) turns usage into dollars with: us-east-1, on demand, USD.

Each price names the page it comes from and the date it was read.  Free tiers are left out: the
figures are the marginal cost of a task at scale.  Where a price has volume tiers, the first
paid tier is used.  What AWS does not charge for is listed with a price of 0 and its source, so
that leaving it out is a documented decision, not an omission.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

READ = "2026-11-23"


@dataclass(frozen=True)
class Price:
    name: str
    usd: float      # per unit
    unit: str
    source: str
    read: str = READ


LAMBDA_REQUEST = Price("Lambda requests", 0.20 / 1e6, "request (an invocation, whatever its batch)",
                       "https://aws.amazon.com/lambda/pricing/")
LAMBDA_GB_SECOND = Price("Lambda duration", 0.0000166667, "GB-second (x86, first 6 billion GB-s a month; "
                         "billed per 1 ms)", "https://aws.amazon.com/lambda/pricing/")
LAMBDA_GB_SECOND_ARM64 = Price("Lambda duration (arm64)", 0.0000133334,
                               "GB-second (arm64, first 7.5 billion GB-s a month; billed per 1 ms)",
                               "https://aws.amazon.com/lambda/pricing/")
DYNAMODB_WRITE_UNIT = Price("DynamoDB write request units", 0.625 / 1e6,
                            "write request unit (1 KB of item; 2 per KB in a transaction)",
                            "https://aws.amazon.com/dynamodb/pricing/on-demand/")
DYNAMODB_READ_UNIT = Price("DynamoDB read request units", 0.125 / 1e6,
                           "read request unit (4 KB strongly consistent, 8 KB eventually; 2 per 4 KB in a transaction)",
                           "https://aws.amazon.com/dynamodb/pricing/on-demand/")
SQS_REQUEST = Price("SQS requests", 0.40 / 1e6, "request of a standard queue (each 64 KB chunk of a payload is one)",
                    "https://aws.amazon.com/sqs/pricing/")
SNS_PUBLISH = Price("SNS publishes", 0.50 / 1e6, "request of a standard topic (64 KB chunk; deliveries to SQS free)",
                    "https://aws.amazon.com/sns/pricing/")
SCHEDULER_INVOCATION = Price("EventBridge Scheduler invocations", 1.00 / 1e6,
                             "invocation (after 14 million free a month; schedule create/update/delete not charged)",
                             "https://aws.amazon.com/eventbridge/pricing/")
STREAM_READ_BY_LAMBDA = Price("DynamoDB Streams reads by Lambda", 0.0,
                              "GetRecords made by a Lambda trigger are not charged",
                              "https://aws.amazon.com/dynamodb/pricing/on-demand/ (Change data capture)")
KMS_REQUEST = Price("AWS KMS requests", 0.03 / 1e4,
                    "request (the Decrypt of an SSM SecureString read WithDecryption: the webhook's secret)",
                    "https://aws.amazon.com/kms/pricing/")
SSM_PARAMETER_READ = Price("SSM Parameter Store API", 0.0,
                           "GetParameter of a standard parameter at standard throughput is not charged",
                           "https://aws.amazon.com/systems-manager/pricing/")
SCHEDULER_API = Price("EventBridge Scheduler API", 0.0, "CreateSchedule and the other schedule calls are not charged",
                      "https://aws.amazon.com/eventbridge/pricing/")
TTL_DELETE = Price("DynamoDB TTL deletes", 0.0, "deletes made by TTL consume no write units",
                   "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/TTL.html")
LOG_INGESTION = Price("CloudWatch Logs ingestion", 0.50 / 1e9,
                      "byte of log lines ingested (standard log class, $0.50 per GB; the app's JSON lines and EMF, "
                      "Lambda's START, END and REPORT)",
                      "https://aws.amazon.com/cloudwatch/pricing/")
DYNAMODB_STORAGE = Price("DynamoDB storage", 0.25 / 1e9,
                         "byte-month stored (standard table class, $0.25 per GB-month after the first 25 GB; "
                         "an item's size plus 100 bytes of overhead)",
                         "https://aws.amazon.com/dynamodb/pricing/on-demand/")

# Protection of a table's data (bench/export_prices.py): per GB of table (DynamoDB bills backups and exports by the
# table's size; an export's DynamoDB JSON is taken as large as the table, its gzip left out: a bound from above).
BACKUP_STORAGE = Price("DynamoDB on-demand backup storage", 0.10, "GB-month of backup (warm)",
                       "https://aws.amazon.com/dynamodb/pricing/on-demand/")
AWS_BACKUP_WARM = Price("AWS Backup, DynamoDB warm storage", 0.10, "GB-month of a backup or its copy (warm)",
                        "https://aws.amazon.com/backup/pricing/")
INTER_REGION_TRANSFER = Price("Data transfer between regions", 0.02,
                              "GB copied to another region (an AWS Backup copy, S3 replication)",
                              "https://aws.amazon.com/ec2/pricing/on-demand/#Data_Transfer")
EXPORT_FULL = Price("DynamoDB export to S3 (full)", 0.10, "GB of table exported",
                    "https://aws.amazon.com/dynamodb/pricing/on-demand/")
EXPORT_INCREMENTAL = Price("DynamoDB export to S3 (incremental)", 0.10,
                           "GB of changed data exported (10 MB billed at least an export)",
                           "https://aws.amazon.com/dynamodb/pricing/on-demand/")
INCREMENTAL_MIN_GB = 0.01  # an incremental export bills 10 MB at least
IMPORT_FROM_S3 = Price("DynamoDB import from S3", 0.15, "GB of (uncompressed) data imported",
                       "https://aws.amazon.com/dynamodb/pricing/on-demand/")
S3_STANDARD = Price("S3 Standard storage", 0.023, "GB-month (first 50 TB)", "https://aws.amazon.com/s3/pricing/")
S3_GLACIER_IR = Price("S3 Glacier Instant Retrieval storage", 0.004,
                      "GB-month (90 days at least; $0.03 a GB retrieved)", "https://aws.amazon.com/s3/pricing/")
S3_GLACIER_IR_RETRIEVAL = Price("S3 Glacier Instant Retrieval retrieval", 0.03, "GB read back (an import)",
                                "https://aws.amazon.com/s3/pricing/")
S3_PUT = Price("S3 PUT, COPY, POST, LIST requests", 0.005 / 1e3,
               "request (PutObjectRetention, ListObjectVersions, DeleteObjects)", "https://aws.amazon.com/s3/pricing/")
S3_GET = Price("S3 GET requests", 0.0004 / 1e3, "request (the manifests' reads, the lock configuration)",
               "https://aws.amazon.com/s3/pricing/")

# The actions' own prices: listed apart from the app's cost per task (each action is the user's cost).
SES_EMAIL = Price("SES outbound email", 0.10 / 1e3, "email sent (the email action)", "https://aws.amazon.com/ses/pricing/")
EVENTBRIDGE_EVENT = Price("EventBridge custom events", 1.00 / 1e6,
                          "event put on a bus (each 64 KB chunk of an entry is one; the eventbridge action)",
                          "https://aws.amazon.com/eventbridge/pricing/")
STEP_FUNCTIONS_TRANSITION = Price("Step Functions Standard state transitions", 0.025 / 1e3,
                                  "state transition of a Standard execution (StartExecution itself is not charged; "
                                  "the stepfunctions action's execution makes at least one)",
                                  "https://aws.amazon.com/step-functions/pricing/")

TABLE: tuple[Price, ...] = (LAMBDA_REQUEST, LAMBDA_GB_SECOND, DYNAMODB_WRITE_UNIT, DYNAMODB_READ_UNIT, SQS_REQUEST,
                            SNS_PUBLISH, SCHEDULER_INVOCATION, STREAM_READ_BY_LAMBDA, TTL_DELETE, LOG_INGESTION,
                            DYNAMODB_STORAGE, SES_EMAIL, EVENTBRIDGE_EVENT, STEP_FUNCTIONS_TRANSITION,
                            LAMBDA_GB_SECOND_ARM64, KMS_REQUEST, SSM_PARAMETER_READ, SCHEDULER_API, BACKUP_STORAGE,
                            AWS_BACKUP_WARM, INTER_REGION_TRANSFER, EXPORT_FULL, EXPORT_INCREMENTAL, IMPORT_FROM_S3, S3_STANDARD,
                            S3_GLACIER_IR, S3_GLACIER_IR_RETRIEVAL, S3_PUT, S3_GET)

#: How each service's requests are priced: the kind of usage they count in (DynamoDB's in units, worked out by
#: bench/capacity.py), or the price that says they cost nothing.  A call of a service not listed is unpriced: the
#: suite fails on it.
SERVICE_PRICES: dict[str, str | Price] = {
    "dynamodb": "write_units and read_units", "sqs": "sqs_requests", "sns": "sns_publishes",
    "scheduler": SCHEDULER_API, "ssm": "kms_requests",
    "sesv2": SES_EMAIL, "lambda": LAMBDA_REQUEST, "events": EVENTBRIDGE_EVENT,
    "stepfunctions": STEP_FUNCTIONS_TRANSITION,  # the actions' own: listed apart (ACTION_PRICES)
}

#: What one execution of each action type costs on its own (the target's side: a lambda action's invocation is a
#: Lambda request, its function's duration the user's; a Standard execution of one state is one transition).
ACTION_PRICES: dict[str, tuple[tuple[Price, float], ...]] = {
    "email": ((SES_EMAIL, 1.0),),
    "lambda": ((LAMBDA_REQUEST, 1.0),),
    "eventbridge": ((EVENTBRIDGE_EVENT, 1.0),),
    "stepfunctions": ((STEP_FUNCTIONS_TRANSITION, 1.0),),
    "webhook": (),  # an HTTPS POST to the user's receiver: no AWS charge (Lambda's data transfer out aside)
}


def action_per_million(action: str) -> float:
    """Dollars per million executions of an ``action`` type's own AWS charge, apart from the app's."""
    return sum(price.usd * count for price, count in ACTION_PRICES[action]) * 1e6

#: DynamoDB's storage overhead per item (bytes), and the month AWS's GB-month is measured over (hours).
ITEM_OVERHEAD_BYTES = 100
HOURS_A_MONTH = 730


@dataclass(frozen=True)
class Usage:
    """What one task uses, on average (fractions: a batch or a fixed cost shared by many tasks)."""

    lambda_requests: float = 0.0
    lambda_gb_seconds: float = 0.0
    write_units: float = 0.0
    read_units: float = 0.0
    sqs_requests: float = 0.0
    sns_publishes: float = 0.0
    scheduler_invocations: float = 0.0
    log_bytes: float = 0.0
    stored_byte_months: float = 0.0
    lambda_arm64_gb_seconds: float = 0.0  # duration of the functions .chalice/config.json deploys on arm64
    kms_requests: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


#: Which price each kind of usage is charged at.
PRICE_OF: dict[str, Price] = {
    "lambda_requests": LAMBDA_REQUEST,
    "lambda_gb_seconds": LAMBDA_GB_SECOND,
    "write_units": DYNAMODB_WRITE_UNIT,
    "read_units": DYNAMODB_READ_UNIT,
    "sqs_requests": SQS_REQUEST,
    "sns_publishes": SNS_PUBLISH,
    "scheduler_invocations": SCHEDULER_INVOCATION,
    "log_bytes": LOG_INGESTION,
    "stored_byte_months": DYNAMODB_STORAGE,
    "lambda_arm64_gb_seconds": LAMBDA_GB_SECOND_ARM64,
    "kms_requests": KMS_REQUEST,
}


def stored_byte_months(item_bytes: float, days: float) -> float:
    """Byte-months of one item of ``item_bytes`` (its DynamoDB size) kept ``days``, overhead included."""
    return byte_months(item_bytes + ITEM_OVERHEAD_BYTES, days)


def byte_months(stored_bytes: float, days: float) -> float:
    """Byte-months of ``stored_bytes`` (overheads included) kept ``days``."""
    return stored_bytes * days * 24 / HOURS_A_MONTH


def cost(usage: Usage) -> dict[str, float]:
    """Dollars per task, by kind of usage."""
    return {f.name: getattr(usage, f.name) * PRICE_OF[f.name].usd for f in fields(usage)}


def per_million(usage: Usage) -> float:
    """Dollars per million tasks."""
    return sum(cost(usage).values()) * 1e6


def table() -> list[dict[str, Any]]:
    """The price table, for results.json."""
    return [asdict(price) for price in TABLE]
