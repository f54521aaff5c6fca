-- Mirrors: scheduler.services.submission, scheduler.services.flow, scheduler.services.gates, scheduler.services.hotpath, scheduler.definitions, scheduler.services.waits, scheduler.services.saga, scheduler.contracts.
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
    v_value jsonb;
    v_concurrency_key text := '';
BEGIN
    SELECT id, name, version, deadline_seconds, input_schema, concurrency, debounce, throttle, plain INTO v_wf
    FROM scheduler_workflow WHERE name = p_workflow ORDER BY version DESC LIMIT 1;
    -- NULL for an unknown workflow, for one with an input schema (the general path,
    -- scheduler.services.submission, checks the input), for a version that is not plain
    -- (scheduler.definitions.step_plain: waits, sub-workflows, conditions, fan-outs, projections),
    -- whose jobs the general path creates, starting their waits and children, evaluating their
    -- conditions and making their items, and for one with a debounce or a throttle
    -- (scheduler.services.gates), whose jobs the general path holds at their gates.
    IF NOT FOUND OR v_wf.input_schema IS NOT NULL OR NOT v_wf.plain
       OR v_wf.debounce IS NOT NULL OR v_wf.throttle IS NOT NULL THEN
        RETURN NULL;
    END IF;
    -- A concurrency key (scheduler.services.flow): admitted here when it is an input field
    -- (`input.a.b`) holding a scalar, and the key has room with nobody waiting; NULL otherwise,
    -- and the general path reads the key, makes the job wait, refuses it or cancels a holder.
    IF v_wf.concurrency IS NOT NULL THEN
        IF NOT (v_wf.concurrency ->> 'key') ~ '^input(\.[A-Za-z_][A-Za-z0-9_]*)+$' THEN
            RETURN NULL;
        END IF;
        v_value := p_input #> string_to_array(substr(v_wf.concurrency ->> 'key', 7), '.');
        -- A number's text is Python's to write (1.10 is "1.1" there), an object's JSON too.
        IF v_value IS NOT NULL AND jsonb_typeof(v_value) NOT IN ('string', 'null') THEN
            RETURN NULL;
        END IF;
        -- As flow.key_value: a string as it is; null (or nothing there) reads nothing.
        v_concurrency_key := COALESCE(v_value #>> '{}', '');
        IF length(v_concurrency_key) > 200 THEN
            RETURN NULL;
        END IF;
        IF v_concurrency_key <> '' THEN
            PERFORM pg_advisory_xact_lock(hashtext('sas_concurrency:' || v_wf.name || ':' || v_concurrency_key));
            IF (SELECT count(*) FROM scheduler_job j JOIN scheduler_workflow w ON w.id = j.workflow_id
                WHERE j.concurrency_key = v_concurrency_key AND w.name = v_wf.name
                  AND j.status = ANY (sas_key_holding())) >= (v_wf.concurrency ->> 'limit')::integer
               OR EXISTS (SELECT 1 FROM scheduler_job j JOIN scheduler_workflow w ON w.id = j.workflow_id
                          WHERE j.concurrency_key = v_concurrency_key AND w.name = v_wf.name
                            AND j.status = 'waiting') THEN
                RETURN NULL;
            END IF;
        END IF;
    END IF;
    -- A job is created running: its first steps are dispatched in this same transaction.
    -- The columns this function sets; the others take the database's default (NULL, or the
    -- model's db_default), so a column added later needs no change here.
    INSERT INTO scheduler_job (id, workflow_id, status, input, submitter_id, idempotency_key, request_hash,
        compensation_reason, deadline, callback_url, trace_parent, business_key, priority,
        concurrency_key, created_at, updated_at)
    VALUES (v_job_id, v_wf.id, 'running', p_input, p_submitter, p_key, p_hash, '',
        CASE WHEN v_wf.deadline_seconds IS NOT NULL AND v_wf.deadline_seconds > 0
             THEN v_now + make_interval(secs => v_wf.deadline_seconds) END,
        p_callback_url, p_trace_parent, p_business_key, p_priority, v_concurrency_key, v_now, v_now);
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
