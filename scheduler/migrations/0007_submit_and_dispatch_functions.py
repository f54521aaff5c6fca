"""Submission on PostgreSQL in one round trip, and one dispatch routine for it and the outcome.

`sas_dispatch_ready(job, now, ...)` writes, for every pending step of a job whose dependencies
have all succeeded, what scheduler.services.dispatch writes: the intent, the attempt, the task
(a compact queue row, announced when the queue was otherwise empty) and the event. The caller
holds the job's row lock (or has just created the job).

`sas_submit` creates a job of a workflow's latest version with its steps and its
`job_submitted` event, and dispatches its first steps; it answers NULL for an unknown workflow.
The rules around it (input checks, idempotency keys and their replays) stay in
scheduler.services.submission, which calls it.

`sas_record_outcome` is the same as in 0006, its DAG advance now through `sas_dispatch_ready`.
The tests run the same submissions and outcomes through these functions and through the Python
services and compare every row they leave.
"""

from django.db import migrations

DISPATCH = r"""
CREATE OR REPLACE FUNCTION sas_dispatch_ready(
    p_job uuid, p_now timestamptz, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_job_id uuid := p_job;
    v_now timestamptz := p_now;
    r record;
    v_healthy integer;
    v_ep_id bigint;
    v_ep_url text;
    v_number integer;
    v_deadline timestamptz;
    v_row bigint;
    v_reason text;
    v_count integer := 0;
BEGIN
    -- Every pending action step whose dependencies have all succeeded, oldest first: its intent,
    -- its attempt, its task (a compact queue row) and its event, as scheduler.services.dispatch
    -- writes them. The caller holds the job's row lock.
    FOR r IN
        SELECT s.id, s.attempt, s.calls, s.first_dispatched_at, s.pool_id, d.depends_on,
               p.timeout_seconds, p.version AS policy_version, p.name AS policy_name,
               ap.kind AS pool_kind, ap.name AS pool_name
        FROM scheduler_step s
        JOIN scheduler_stepdefinition d ON d.id = s.definition_id
        JOIN supervisor_remediationpolicy p ON p.id = d.policy_id
        JOIN agents_agentpool ap ON ap.id = s.pool_id
        WHERE s.job_id = v_job_id AND s.kind = 'action' AND s.status = 'pending'
          AND NOT EXISTS (
              SELECT 1 FROM jsonb_array_elements_text(d.depends_on) AS dep(name)
              WHERE NOT EXISTS (
                  SELECT 1 FROM scheduler_step s2
                  WHERE s2.job_id = v_job_id AND s2.kind = 'action' AND s2.name = dep.name
                    AND s2.status = 'succeeded'))
        ORDER BY s.id
    LOOP
        -- The endpoint, as agents.health.choose_endpoint picks it for a first dispatch: the
        -- healthy enabled endpoints spread by step id, else the one whose cool-down ends first.
        v_ep_id := NULL;
        v_ep_url := '';
        IF r.pool_kind = 'http' THEN
            SELECT count(*) INTO v_healthy FROM agents_agentendpoint
            WHERE pool_id = r.pool_id AND enabled
              AND (circuit_open_until IS NULL OR circuit_open_until <= v_now);
            IF v_healthy > 0 THEN
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                  AND (circuit_open_until IS NULL OR circuit_open_until <= v_now)
                ORDER BY id OFFSET (r.id % v_healthy) LIMIT 1;
            ELSE
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                ORDER BY COALESCE(circuit_open_until, v_now), id LIMIT 1;
                v_ep_url := COALESCE(v_ep_url, '');
            END IF;
        END IF;
        v_number := r.attempt + 1;
        v_deadline := v_now + make_interval(secs => r.timeout_seconds);
        UPDATE scheduler_step SET status = 'dispatched', attempt = v_number, calls = r.calls + 1,
            endpoint_id = v_ep_id, deadline = v_deadline, not_before = NULL,
            first_dispatched_at = COALESCE(r.first_dispatched_at, v_now), updated_at = v_now
        WHERE id = r.id AND status = 'pending' AND attempt = r.attempt;
        INSERT INTO django_q_ormq (key, payload, lock)
        VALUES (p_queue_key,
                'sas1 ' || GREATEST(p_task_floor, trunc(r.timeout_seconds)::integer + 30) || ' '
                    || p_task_func || ' ' || r.id || ' ' || v_number,
                v_now)
        RETURNING id INTO v_row;
        IF p_notify AND NOT EXISTS (SELECT 1 FROM django_q_ormq WHERE key = p_queue_key AND id <> v_row) THEN
            PERFORM pg_notify('sas_tasks', '');
        END IF;
        INSERT INTO scheduler_attempt (step_id, number, kind, pool_id, endpoint_id, endpoint_url,
            policy_version, dispatched_at, deadline, started_at, queue_row, finished_at, outcome,
            decided_by, status_code, latency_ms, response_excerpt, error, late_outcome, late_at)
        VALUES (r.id, v_number, 'call', r.pool_id, v_ep_id, v_ep_url, r.policy_version, v_now,
            v_deadline, NULL, v_row, NULL, '', '', NULL, NULL, '', '', '', NULL);
        SELECT CASE WHEN count(*) = 0 THEN 'ready: no dependencies'
                    ELSE string_agg(dep, ', ' ORDER BY ord) || ' succeeded' END
        INTO v_reason FROM jsonb_array_elements_text(r.depends_on) WITH ORDINALITY AS t(dep, ord);
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, r.id, 'step_dispatched', 'pending', 'dispatched', v_number, NULL, p_source,
                v_reason,
                jsonb_build_object('kind', 'call', 'pool', r.pool_name, 'endpoint', v_ep_url,
                                   'policy', r.policy_name, 'policy_version', r.policy_version,
                                   'deadline', v_deadline),
                v_now);
        v_count := v_count + 1;
    END LOOP;

    RETURN v_count;
END
$fn$;
"""

SUBMIT = r"""
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
    r record;
    v_healthy integer;
    v_ep_id bigint;
    v_ep_url text;
    v_number integer;
    v_deadline timestamptz;
    v_row bigint;
    v_reason text;
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
    FOR r IN
        SELECT s.id, s.attempt, s.calls, s.first_dispatched_at, s.pool_id, d.depends_on,
               p.timeout_seconds, p.version AS policy_version, p.name AS policy_name,
               ap.kind AS pool_kind, ap.name AS pool_name
        FROM scheduler_step s
        JOIN scheduler_stepdefinition d ON d.id = s.definition_id
        JOIN supervisor_remediationpolicy p ON p.id = d.policy_id
        JOIN agents_agentpool ap ON ap.id = s.pool_id
        WHERE s.job_id = v_job_id AND s.kind = 'action' AND s.status = 'pending'
          AND NOT EXISTS (
              SELECT 1 FROM jsonb_array_elements_text(d.depends_on) AS dep(name)
              WHERE NOT EXISTS (
                  SELECT 1 FROM scheduler_step s2
                  WHERE s2.job_id = v_job_id AND s2.kind = 'action' AND s2.name = dep.name
                    AND s2.status = 'succeeded'))
        ORDER BY s.id
    LOOP
        -- The endpoint, as agents.health.choose_endpoint picks it for a first dispatch: the
        -- healthy enabled endpoints spread by step id, else the one whose cool-down ends first.
        v_ep_id := NULL;
        v_ep_url := '';
        IF r.pool_kind = 'http' THEN
            SELECT count(*) INTO v_healthy FROM agents_agentendpoint
            WHERE pool_id = r.pool_id AND enabled
              AND (circuit_open_until IS NULL OR circuit_open_until <= v_now);
            IF v_healthy > 0 THEN
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                  AND (circuit_open_until IS NULL OR circuit_open_until <= v_now)
                ORDER BY id OFFSET (r.id % v_healthy) LIMIT 1;
            ELSE
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                ORDER BY COALESCE(circuit_open_until, v_now), id LIMIT 1;
                v_ep_url := COALESCE(v_ep_url, '');
            END IF;
        END IF;
        v_number := r.attempt + 1;
        v_deadline := v_now + make_interval(secs => r.timeout_seconds);
        UPDATE scheduler_step SET status = 'dispatched', attempt = v_number, calls = r.calls + 1,
            endpoint_id = v_ep_id, deadline = v_deadline, not_before = NULL,
            first_dispatched_at = COALESCE(r.first_dispatched_at, v_now), updated_at = v_now
        WHERE id = r.id AND status = 'pending' AND attempt = r.attempt;
        INSERT INTO django_q_ormq (key, payload, lock)
        VALUES (p_queue_key,
                'sas1 ' || GREATEST(p_task_floor, trunc(r.timeout_seconds)::integer + 30) || ' '
                    || p_task_func || ' ' || r.id || ' ' || v_number,
                v_now)
        RETURNING id INTO v_row;
        IF p_notify AND NOT EXISTS (SELECT 1 FROM django_q_ormq WHERE key = p_queue_key AND id <> v_row) THEN
            PERFORM pg_notify('sas_tasks', '');
        END IF;
        INSERT INTO scheduler_attempt (step_id, number, kind, pool_id, endpoint_id, endpoint_url,
            policy_version, dispatched_at, deadline, started_at, queue_row, finished_at, outcome,
            decided_by, status_code, latency_ms, response_excerpt, error, late_outcome, late_at)
        VALUES (r.id, v_number, 'call', r.pool_id, v_ep_id, v_ep_url, r.policy_version, v_now,
            v_deadline, NULL, v_row, NULL, '', '', NULL, NULL, '', '', '', NULL);
        SELECT CASE WHEN count(*) = 0 THEN 'ready: no dependencies'
                    ELSE string_agg(dep, ', ' ORDER BY ord) || ' succeeded' END
        INTO v_reason FROM jsonb_array_elements_text(r.depends_on) WITH ORDINALITY AS t(dep, ord);
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, r.id, 'step_dispatched', 'pending', 'dispatched', v_number, NULL, p_source,
                v_reason,
                jsonb_build_object('kind', 'call', 'pool', r.pool_name, 'endpoint', v_ep_url,
                                   'policy', r.policy_name, 'policy_version', r.policy_version,
                                   'deadline', v_deadline),
                v_now);
    END LOOP;

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

DROP = """
DROP FUNCTION IF EXISTS sas_submit(text, jsonb, integer, text, text, text, text, text, integer, boolean);
DROP FUNCTION IF EXISTS sas_dispatch_ready(uuid, timestamptz, text, text, text, integer, boolean);
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in (DISPATCH, SUBMIT, RECORD):
            schema_editor.execute(sql, params=None)


def restore(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PREVIOUS_RECORD, params=None)
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0006_record_outcome_function")]

    operations = [migrations.RunPython(create, restore)]
