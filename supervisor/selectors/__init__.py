"""Read queries for the operator console (/ops/), one module per page or panel.

Every selector here runs a small, fixed number of queries whatever the size of the history, and
reads hot tables only through the indexes designed for them (docs/database-code.md, "Indexes"):

- live steps through the partial index `step_live_idx` (a `status IN (...)` filter on live
  statuses), so the overview and the Needs-attention list cost the live work, not the table;
- jobs by status through `job_status_created_idx` / `job_created_idx`: live jobs (all of them)
  and the jobs created in the last 24 hours;
- throughput through `event_kind_created_idx` (kind, created_at), bounded to the last hour;
- definitions (workflows, pools, policies) in a few queries per page, whatever their number;
- timeout calibration over the most recent attempts only (a primary-key range), never all history.
"""

from supervisor.selectors.at_risk import AtRiskRow, at_risk_jobs
from supervisor.selectors.attention import (
    AttentionFilters,
    AttentionItem,
    AttentionList,
    attention_item,
    attention_step_ids,
    needs_attention,
    step_job_and_name,
    step_job_id,
)
from supervisor.selectors.calibration import Calibration, CalibrationRow, calibration
from supervisor.selectors.definitions import (
    PolicyDetail,
    PoolRow,
    WorkflowDetail,
    WorkflowRow,
    policy_detail,
    policy_rows,
    pool_list,
    workflow_detail,
    workflow_list,
)
from supervisor.selectors.jobs import (
    ITEMS_PER_PAGE,
    ItemsPage,
    JobDetail,
    JobFilters,
    Progress,
    StepRow,
    job_detail,
    job_items,
    jobs_search,
    signal_taker,
    step_progress,
    workflow_names,
)
from supervisor.selectors.overview import Overview, overview, signature
from supervisor.selectors.policies import policy_get, policy_list, policy_revisions
from supervisor.selectors.schedules import ScheduleRow, schedule_rows
from supervisor.selectors.waits import Wait, decidable_steps, wait_kind_text, wait_of

__all__ = [
    "ITEMS_PER_PAGE",
    "AtRiskRow",
    "AttentionFilters",
    "AttentionItem",
    "AttentionList",
    "Calibration",
    "CalibrationRow",
    "ItemsPage",
    "JobDetail",
    "JobFilters",
    "Overview",
    "PolicyDetail",
    "PoolRow",
    "Progress",
    "ScheduleRow",
    "StepRow",
    "Wait",
    "WorkflowDetail",
    "WorkflowRow",
    "at_risk_jobs",
    "attention_item",
    "attention_step_ids",
    "calibration",
    "decidable_steps",
    "job_detail",
    "job_items",
    "jobs_search",
    "needs_attention",
    "overview",
    "policy_detail",
    "policy_get",
    "policy_list",
    "policy_revisions",
    "policy_rows",
    "pool_list",
    "schedule_rows",
    "signal_taker",
    "signature",
    "step_job_and_name",
    "step_job_id",
    "step_progress",
    "wait_kind_text",
    "wait_of",
    "workflow_detail",
    "workflow_list",
    "workflow_names",
]
