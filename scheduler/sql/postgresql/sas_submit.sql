-- Mirrors: scheduler.services.submission, scheduler.services.hotpath, scheduler.services.waits, scheduler.services.saga, scheduler.contracts.
-- A job of a workflow's latest version, its steps and its event, then the dispatch of its first
-- steps, as job_submit makes them (hotpath.submit calls it by name).
CREATE OR REPLACE FUNCTION sas_submit(
    p_workflow text, p_input jsonb, p_submitter integer, p_key text, p_hash text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean,
    p_callback_url text DEFAULT '', p_trace_parent text DEFAULT '', p_business_key text DEFAULT '',
    p_priority integer DEFAULT 0
) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := statement_timestamp();
    v_wf record;
    v_job_id uuid := gen_random_uuid();
BEGIN
    SELECT id, name, version, deadline_seconds, input_schema INTO v_wf FROM scheduler_workflow
    WHERE name = p_workflow ORDER BY version DESC LIMIT 1;
    -- NULL for an unknown workflow, and for one with an input schema, wait or sub-workflow steps,
    -- conditions or fan-outs: the general path (scheduler.services.submission) checks those
    -- inputs, creates those jobs, starts their waits and children, evaluates their conditions and
    -- makes their items.
    IF NOT FOUND OR v_wf.input_schema IS NOT NULL OR EXISTS (
        SELECT 1 FROM scheduler_stepdefinition
        WHERE workflow_id = v_wf.id AND (kind <> 'call' OR "when" <> '' OR for_each <> '')) THEN
        RETURN NULL;
    END IF;
    -- A job is created running: its first steps are dispatched in this same transaction.
    INSERT INTO scheduler_job (id, workflow_id, status, input, result, submitter_id, idempotency_key,
        request_hash, compensation_reason, paused_at, deadline, callback_url, trace_parent, business_key,
        priority, rerun_of_id, created_at, updated_at, finished_at)
    VALUES (v_job_id, v_wf.id, 'running', p_input, NULL, p_submitter, p_key, p_hash, '', NULL,
        CASE WHEN v_wf.deadline_seconds IS NOT NULL AND v_wf.deadline_seconds > 0
             THEN v_now + make_interval(secs => v_wf.deadline_seconds) END,
        p_callback_url, p_trace_parent, p_business_key, p_priority, NULL, v_now, v_now, NULL);
    INSERT INTO scheduler_step (job_id, definition_id, name, kind, compensates_id, status, operation_id,
        attempt, calls, last_outcome, pool_id, endpoint_id, deadline, not_before, first_dispatched_at,
        output, error, input_override, reused_from_id, created_at, updated_at, finished_at)
    SELECT v_job_id, d.id, d.name, 'action', NULL, 'pending', gen_random_uuid()::text, 0, 0, '',
        d.pool_id, NULL, NULL, NULL, NULL, NULL, '', NULL, NULL, v_now, v_now, NULL
    FROM scheduler_stepdefinition d WHERE d.workflow_id = v_wf.id ORDER BY d.position;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, NULL, 'job_submitted', '', 'running', NULL, p_submitter, p_source, '',
            jsonb_build_object('workflow', v_wf.name, 'version', v_wf.version), v_now);
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);
    RETURN v_job_id;
END
$fn$;
