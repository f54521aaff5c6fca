-- Mirrors: scheduler.services.submission, scheduler.services.hotpath, scheduler.definitions, scheduler.services.waits, scheduler.services.saga, scheduler.contracts.
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
    SELECT id, name, version, deadline_seconds, input_schema, plain INTO v_wf FROM scheduler_workflow
    WHERE name = p_workflow ORDER BY version DESC LIMIT 1;
    -- NULL for an unknown workflow, for one with an input schema (the general path,
    -- scheduler.services.submission, checks the input) and for a version that is not plain
    -- (scheduler.definitions.step_plain: waits, sub-workflows, conditions, fan-outs, projections),
    -- whose jobs the general path creates, starting their waits and children, evaluating their
    -- conditions and making their items.
    IF NOT FOUND OR v_wf.input_schema IS NOT NULL OR NOT v_wf.plain THEN
        RETURN NULL;
    END IF;
    -- A job is created running: its first steps are dispatched in this same transaction.
    -- The columns this function sets; the others take the database's default (NULL, or the
    -- model's db_default), so a column added later needs no change here.
    INSERT INTO scheduler_job (id, workflow_id, status, input, submitter_id, idempotency_key, request_hash,
        compensation_reason, deadline, callback_url, trace_parent, business_key, priority, created_at,
        updated_at)
    VALUES (v_job_id, v_wf.id, 'running', p_input, p_submitter, p_key, p_hash, '',
        CASE WHEN v_wf.deadline_seconds IS NOT NULL AND v_wf.deadline_seconds > 0
             THEN v_now + make_interval(secs => v_wf.deadline_seconds) END,
        p_callback_url, p_trace_parent, p_business_key, p_priority, v_now, v_now);
    INSERT INTO scheduler_step (job_id, definition_id, name, kind, status, operation_id, attempt, calls,
        last_outcome, pool_id, error, created_at, updated_at)
    SELECT v_job_id, d.id, d.name, 'action', 'pending', gen_random_uuid()::text, 0, 0, '', d.pool_id, '',
        v_now, v_now
    FROM scheduler_stepdefinition d WHERE d.workflow_id = v_wf.id ORDER BY d.position;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, NULL, 'job_submitted', '', 'running', NULL, p_submitter, p_source, '',
            jsonb_build_object('workflow', v_wf.name, 'version', v_wf.version), v_now);
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);
    RETURN v_job_id;
END
$fn$;
