"""Completion callbacks and traces through the PostgreSQL functions.

`sas_submit` stores the job's `callback_url` and `trace_parent`; `sas_record_outcome`, when it
completes a job that has a callback URL, writes the callback into the outbox (scheduler_delivery)
in the same transaction, as scheduler.transitions.job_transition does on the Python path.
"""

from django.db import migrations

SUBMIT = r"""
CREATE OR REPLACE FUNCTION sas_submit(
    p_workflow text, p_input jsonb, p_submitter integer, p_key text, p_hash text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean,
    p_callback_url text, p_trace_parent text
) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := statement_timestamp();
    v_wf record;
    v_job_id uuid := gen_random_uuid();
BEGIN
    SELECT id, name, version, deadline_seconds INTO v_wf FROM scheduler_workflow
    WHERE name = p_workflow ORDER BY version DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A job is created running: its first steps are dispatched in this same transaction.
    INSERT INTO scheduler_job (id, workflow_id, status, input, result, submitter_id, idempotency_key,
        request_hash, compensation_reason, paused_at, deadline, callback_url, trace_parent, created_at,
        updated_at, finished_at)
    VALUES (v_job_id, v_wf.id, 'running', p_input, NULL, p_submitter, p_key, p_hash, '', NULL,
        CASE WHEN v_wf.deadline_seconds IS NOT NULL AND v_wf.deadline_seconds > 0
             THEN v_now + make_interval(secs => v_wf.deadline_seconds) END,
        p_callback_url, p_trace_parent, v_now, v_now, NULL);
    INSERT INTO scheduler_step (job_id, definition_id, name, kind, compensates_id, status, operation_id,
        attempt, calls, last_outcome, pool_id, endpoint_id, deadline, not_before, first_dispatched_at,
        output, error, created_at, updated_at, finished_at)
    SELECT v_job_id, d.id, d.name, 'action', NULL, 'pending', gen_random_uuid()::text, 0, 0, '',
        d.pool_id, NULL, NULL, NULL, NULL, NULL, '', v_now, v_now, NULL
    FROM scheduler_stepdefinition d WHERE d.workflow_id = v_wf.id ORDER BY d.position;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, NULL, 'job_submitted', '', 'running', NULL, p_submitter, p_source, '',
            jsonb_build_object('workflow', v_wf.name, 'version', v_wf.version), v_now);
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);
    RETURN v_job_id;
END
$fn$;
"""

RECORD = r"""
CREATE OR REPLACE FUNCTION sas_record_outcome(
    p_step bigint, p_number integer, p_outcome text, p_output jsonb, p_status_code integer,
    p_latency_ms integer, p_excerpt text, p_error text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := statement_timestamp();
    v_job_id uuid;
    v_job record;
    v_step record;
    v_attempt record;
    v_late boolean;
    v_data jsonb;
    v_to text;
    v_kind text;
BEGIN
    SELECT job_id INTO v_job_id FROM scheduler_step WHERE id = p_step;
    IF NOT FOUND THEN
        RETURN 'fallback';
    END IF;
    -- The job's row lock first; the step is read after it (a statement of its own, so it sees
    -- what the transaction it may have waited for committed).
    SELECT id, status, paused_at INTO v_job FROM scheduler_job WHERE id = v_job_id FOR UPDATE;
    SELECT id, kind, status, attempt INTO v_step FROM scheduler_step WHERE id = p_step;
    IF v_step.kind <> 'action' OR v_step.status <> 'dispatched' OR v_step.attempt <> p_number
       OR v_job.status <> 'running' OR v_job.paused_at IS NOT NULL
       OR p_outcome NOT IN ('succeeded', 'business_failure', 'transient_failure', 'no_answer') THEN
        RETURN 'fallback';
    END IF;
    SELECT id, kind, deadline INTO v_attempt FROM scheduler_attempt
    WHERE step_id = p_step AND number = p_number AND finished_at IS NULL;
    IF NOT FOUND OR v_attempt.kind <> 'call' THEN
        RETURN 'fallback';
    END IF;

    v_late := v_now > v_attempt.deadline;
    UPDATE scheduler_attempt SET
        finished_at = v_now, outcome = p_outcome, decided_by = p_source,
        status_code = p_status_code, latency_ms = p_latency_ms, response_excerpt = p_excerpt,
        error = left(p_error, 2000),
        late_outcome = CASE WHEN v_late AND p_outcome = 'succeeded' THEN 'succeeded' ELSE '' END,
        late_at = CASE WHEN v_late AND p_outcome = 'succeeded' THEN v_now END
    WHERE id = v_attempt.id AND finished_at IS NULL;
    v_data := jsonb_build_object('latency_ms', p_latency_ms, 'status_code', p_status_code);
    IF v_late THEN
        v_data := v_data || '{"late": true}'::jsonb;
    END IF;

    IF p_outcome <> 'succeeded' THEN
        v_to := CASE WHEN p_outcome = 'no_answer' THEN 'unknown' ELSE 'attempt_failed' END;
        v_kind := CASE p_outcome
            WHEN 'no_answer' THEN 'step_no_answer'
            WHEN 'business_failure' THEN 'step_business_failure'
            ELSE 'step_transient_failure' END;
        UPDATE scheduler_step SET status = v_to,
            last_outcome = CASE WHEN v_to = 'unknown' THEN 'no_answer' ELSE p_outcome END,
            error = left(p_error, 2000), updated_at = v_now
        WHERE id = p_step AND status = 'dispatched' AND attempt = p_number;
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, p_step, v_kind, 'dispatched', v_to, p_number, NULL, p_source, p_error, v_data, v_now);
        RETURN 'done';
    END IF;

    UPDATE scheduler_step SET status = 'succeeded', output = p_output, error = '',
        last_outcome = 'succeeded', updated_at = v_now, finished_at = v_now
    WHERE id = p_step AND status = 'dispatched' AND attempt = p_number;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, p_step, 'step_succeeded', 'dispatched', 'succeeded', p_number, NULL, p_source, '',
            v_data, v_now);

    -- The DAG advance: every pending step whose dependencies have all succeeded, oldest first.
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);

    IF NOT EXISTS (SELECT 1 FROM scheduler_step
                   WHERE job_id = v_job_id AND kind = 'action' AND status <> 'succeeded') THEN
        UPDATE scheduler_job SET status = 'succeeded', updated_at = v_now, finished_at = v_now,
            result = (SELECT jsonb_object_agg(name, output) FROM scheduler_step
                      WHERE job_id = v_job_id AND kind = 'action')
        WHERE id = v_job_id AND status = 'running';
        -- The completion callback, in the outbox with the job's last move (as
        -- scheduler.transitions.job_transition writes it).
        INSERT INTO scheduler_delivery (kind, key, target, payload, job_id, subscription_id, status, tries,
                                        next_try_at, last_status_code, last_error, created_at, delivered_at)
        SELECT 'callback', j.id::text || ':succeeded', j.callback_url,
               jsonb_build_object('id', j.id::text, 'workflow', w.name, 'status', 'succeeded',
                                  'result', j.result, 'finished_at', v_now),
               j.id, NULL, 'pending', 0, v_now, NULL, '', v_now, NULL
        FROM scheduler_job j JOIN scheduler_workflow w ON w.id = j.workflow_id
        WHERE j.id = v_job_id AND j.callback_url <> ''
        ON CONFLICT (key) DO NOTHING;
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, NULL, 'job_succeeded', 'running', 'succeeded', NULL, NULL, p_source, '',
                '{}'::jsonb, v_now);
    END IF;
    RETURN 'done';
END
$fn$;
"""

PREVIOUS_RECORD = r"""
CREATE OR REPLACE FUNCTION sas_record_outcome(
    p_step bigint, p_number integer, p_outcome text, p_output jsonb, p_status_code integer,
    p_latency_ms integer, p_excerpt text, p_error text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := statement_timestamp();
    v_job_id uuid;
    v_job record;
    v_step record;
    v_attempt record;
    v_late boolean;
    v_data jsonb;
    v_to text;
    v_kind text;
BEGIN
    SELECT job_id INTO v_job_id FROM scheduler_step WHERE id = p_step;
    IF NOT FOUND THEN
        RETURN 'fallback';
    END IF;
    -- The job's row lock first; the step is read after it (a statement of its own, so it sees
    -- what the transaction it may have waited for committed).
    SELECT id, status, paused_at INTO v_job FROM scheduler_job WHERE id = v_job_id FOR UPDATE;
    SELECT id, kind, status, attempt INTO v_step FROM scheduler_step WHERE id = p_step;
    IF v_step.kind <> 'action' OR v_step.status <> 'dispatched' OR v_step.attempt <> p_number
       OR v_job.status <> 'running' OR v_job.paused_at IS NOT NULL
       OR p_outcome NOT IN ('succeeded', 'business_failure', 'transient_failure', 'no_answer') THEN
        RETURN 'fallback';
    END IF;
    SELECT id, kind, deadline INTO v_attempt FROM scheduler_attempt
    WHERE step_id = p_step AND number = p_number AND finished_at IS NULL;
    IF NOT FOUND OR v_attempt.kind <> 'call' THEN
        RETURN 'fallback';
    END IF;

    v_late := v_now > v_attempt.deadline;
    UPDATE scheduler_attempt SET
        finished_at = v_now, outcome = p_outcome, decided_by = p_source,
        status_code = p_status_code, latency_ms = p_latency_ms, response_excerpt = p_excerpt,
        error = left(p_error, 2000),
        late_outcome = CASE WHEN v_late AND p_outcome = 'succeeded' THEN 'succeeded' ELSE '' END,
        late_at = CASE WHEN v_late AND p_outcome = 'succeeded' THEN v_now END
    WHERE id = v_attempt.id AND finished_at IS NULL;
    v_data := jsonb_build_object('latency_ms', p_latency_ms, 'status_code', p_status_code);
    IF v_late THEN
        v_data := v_data || '{"late": true}'::jsonb;
    END IF;

    IF p_outcome <> 'succeeded' THEN
        v_to := CASE WHEN p_outcome = 'no_answer' THEN 'unknown' ELSE 'attempt_failed' END;
        v_kind := CASE p_outcome
            WHEN 'no_answer' THEN 'step_no_answer'
            WHEN 'business_failure' THEN 'step_business_failure'
            ELSE 'step_transient_failure' END;
        UPDATE scheduler_step SET status = v_to,
            last_outcome = CASE WHEN v_to = 'unknown' THEN 'no_answer' ELSE p_outcome END,
            error = left(p_error, 2000), updated_at = v_now
        WHERE id = p_step AND status = 'dispatched' AND attempt = p_number;
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, p_step, v_kind, 'dispatched', v_to, p_number, NULL, p_source, p_error, v_data, v_now);
        RETURN 'done';
    END IF;

    UPDATE scheduler_step SET status = 'succeeded', output = p_output, error = '',
        last_outcome = 'succeeded', updated_at = v_now, finished_at = v_now
    WHERE id = p_step AND status = 'dispatched' AND attempt = p_number;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, p_step, 'step_succeeded', 'dispatched', 'succeeded', p_number, NULL, p_source, '',
            v_data, v_now);

    -- The DAG advance: every pending step whose dependencies have all succeeded, oldest first.
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);

    IF NOT EXISTS (SELECT 1 FROM scheduler_step
                   WHERE job_id = v_job_id AND kind = 'action' AND status <> 'succeeded') THEN
        UPDATE scheduler_job SET status = 'succeeded', updated_at = v_now, finished_at = v_now,
            result = (SELECT jsonb_object_agg(name, output) FROM scheduler_step
                      WHERE job_id = v_job_id AND kind = 'action')
        WHERE id = v_job_id AND status = 'running';
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, NULL, 'job_succeeded', 'running', 'succeeded', NULL, NULL, p_source, '',
                '{}'::jsonb, v_now);
    END IF;
    RETURN 'done';
END
$fn$;
"""

# The previous signature stays, as a wrapper, so that processes still running the previous
# release keep submitting between `migrate` and their restart (docs/deployment.md, upgrades).
OLD_SUBMIT_WRAPPER = """
CREATE OR REPLACE FUNCTION sas_submit(
    p_workflow text, p_input jsonb, p_submitter integer, p_key text, p_hash text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT sas_submit(p_workflow, p_input, p_submitter, p_key, p_hash, p_source, p_queue_key,
                      p_task_func, p_task_floor, p_notify, '', '');
$fn$;
"""

DROP_NEW_SUBMIT = """
DROP FUNCTION IF EXISTS sas_submit(text, jsonb, integer, text, text, text, text, text, integer, boolean,
                                   text, text);
"""

PREVIOUS_SUBMIT = r"""
CREATE OR REPLACE FUNCTION sas_submit(
    p_workflow text, p_input jsonb, p_submitter integer, p_key text, p_hash text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := statement_timestamp();
    v_wf record;
    v_job_id uuid := gen_random_uuid();
BEGIN
    SELECT id, name, version, deadline_seconds INTO v_wf FROM scheduler_workflow
    WHERE name = p_workflow ORDER BY version DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A job is created running: its first steps are dispatched in this same transaction.
    INSERT INTO scheduler_job (id, workflow_id, status, input, result, submitter_id, idempotency_key,
        request_hash, compensation_reason, paused_at, deadline, created_at, updated_at, finished_at)
    VALUES (v_job_id, v_wf.id, 'running', p_input, NULL, p_submitter, p_key, p_hash, '', NULL,
        CASE WHEN v_wf.deadline_seconds IS NOT NULL AND v_wf.deadline_seconds > 0
             THEN v_now + make_interval(secs => v_wf.deadline_seconds) END,
        v_now, v_now, NULL);
    INSERT INTO scheduler_step (job_id, definition_id, name, kind, compensates_id, status, operation_id,
        attempt, calls, last_outcome, pool_id, endpoint_id, deadline, not_before, first_dispatched_at,
        output, error, created_at, updated_at, finished_at)
    SELECT v_job_id, d.id, d.name, 'action', NULL, 'pending', gen_random_uuid()::text, 0, 0, '',
        d.pool_id, NULL, NULL, NULL, NULL, NULL, '', v_now, v_now, NULL
    FROM scheduler_stepdefinition d WHERE d.workflow_id = v_wf.id ORDER BY d.position;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, NULL, 'job_submitted', '', 'running', NULL, p_submitter, p_source, '',
            jsonb_build_object('workflow', v_wf.name, 'version', v_wf.version), v_now);
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);
    RETURN v_job_id;
END
$fn$;
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(SUBMIT, params=None)
        schema_editor.execute(OLD_SUBMIT_WRAPPER, params=None)
        schema_editor.execute(RECORD, params=None)


def restore(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_NEW_SUBMIT, params=None)
        schema_editor.execute(PREVIOUS_SUBMIT, params=None)
        schema_editor.execute(PREVIOUS_RECORD, params=None)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0008_outbox_and_alerts")]

    operations = [migrations.RunPython(create, restore)]
