"""Agent pools and their endpoints: where a step's remote call goes."""

from __future__ import annotations

from django.db import models


class AgentKind(models.TextChoices):
    #: POST to `<endpoint URL><operation path>`.
    HTTP = "http", "HTTP"
    #: Call a dotted-path callable inside the worker (one of SAS_PYTHON_AGENTS).
    PYTHON = "python", "Python callable"
    #: Publish a message to the request queue `<operation path>` on the endpoint's broker
    #: (redis:// or amqp://); the remote replies on the reply queue (agents.queue).
    QUEUE = "queue", "Message queue"


class AgentPool(models.Model):
    """A resource pool: one kind of agent, its instances, and where to go when it is sick."""

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=AgentKind.choices, default=AgentKind.HTTP)
    alternate = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="primaries",
        help_text="Pool a step moves to after the policy's reassign_after_attempts.",
    )
    #: At most this many calls in flight at once (steps beyond it wait for capacity); None: no limit.
    max_in_flight = models.PositiveIntegerField(null=True, blank=True)
    #: At most this many calls started per second; None: no limit.
    max_per_second = models.FloatField(null=True, blank=True)
    #: At most `per_second` calls started per value of `key` (a JMESPath over the call's `input`
    #: and `results`; absent: one bucket for the pool), `burst` at once:
    #: {"key", "per_second", "burst"} (scheduler.services.capacity); None: no keyed rate.
    rate = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=AgentKind.values), name="agentpool_kind_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(max_in_flight__isnull=True) | models.Q(max_in_flight__gte=1),
                name="agentpool_max_in_flight_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(max_per_second__isnull=True) | models.Q(max_per_second__gt=0),
                name="agentpool_max_per_second_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def limited(self) -> bool:
        # Restated for the other apps' database code in `agents/sql/postgresql/sas_agent_pool.sql`.
        return self.max_in_flight is not None or self.max_per_second is not None or self.rate is not None


class AgentEndpoint(models.Model):
    """One instance of a pool. For HTTP pools, a base URL; for queue pools, a broker URL (its
    password in the secret value, its user name in the secret name); python pools need none."""

    pool = models.ForeignKey(AgentPool, on_delete=models.CASCADE, related_name="endpoints")
    url = models.CharField(max_length=500)
    enabled = models.BooleanField(default=True)
    #: Optional header sent with every call (for example `Authorization`). Its value is a secret:
    #: write-only in the API and admin, never put in task arguments or events.
    secret_header_name = models.CharField(max_length=100, blank=True, default="")
    secret_header_value = models.CharField(max_length=500, blank=True, default="")
    #: Circuit breaker: while this is in the future the endpoint is skipped when another is healthy.
    circuit_open_until = models.DateTimeField(null=True, blank=True)
    #: Until when the remote last asked to be left alone (a 429 or 503 with Retry-After): the
    #: circuit is held open that long (agents.health.endpoint_asked_to_wait), and the console says
    #: why.
    wait_asked_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "url"], name="agentendpoint_unique_url"),
        ]

    def __str__(self) -> str:
        return self.url


class ReplyDeadLetters(models.Model):
    """How many queue replies went to a dead-letter queue, by reason (agents.queue.DEAD_REASONS):
    the counter behind `sas_queue_replies_dead_lettered_total`. One row per reason, incremented in
    place (agents.services.reply_dead_letters_count), so it stays a few rows however many replies
    a broker sets aside, and holds whether or not the reply named a job."""

    reason = models.CharField(max_length=40, primary_key=True)
    count = models.BigIntegerField(default=0)
    last_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.reason}: {self.count}"
