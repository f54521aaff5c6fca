-- Mirrors: scheduler.services.outcomes, scheduler.outbox, scheduler.services.hotpath, scheduler.definitions, scheduler.services.waits, scheduler.services.saga, scheduler.services.children, scheduler.services.fanout.
-- The common outcomes of a live call, as step_record_outcome records them, the DAG advance, and
-- the job's completion with its callback (callback_summary); anything else answers 'fallback'.
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
    SELECT j.id, j.status, j.paused_at, j.parent_job_id, j.concurrency_key, w.plain INTO v_job
    FROM scheduler_job j JOIN scheduler_workflow w ON w.id = j.workflow_id
    WHERE j.id = v_job_id FOR UPDATE OF j;
    SELECT id, kind, status, attempt, parent_id, definition_id INTO v_step FROM scheduler_step
    WHERE id = p_step;
    -- A child job (a sub-workflow's) completes on the general path, which tells its parent
    -- (scheduler.outbox.parent_notify); this function does not.
    IF v_step.kind NOT IN ('action', 'item') OR v_step.status <> 'dispatched' OR v_step.attempt <> p_number
       OR v_job.status <> 'running' OR v_job.paused_at IS NOT NULL OR v_job.parent_job_id IS NOT NULL
       OR p_outcome NOT IN ('succeeded', 'business_failure', 'transient_failure', 'no_answer') THEN
        RETURN 'fallback';
    END IF;
    -- A job whose version is not plain (scheduler.definitions.step_plain: wait or sub-workflow
    -- steps, conditions, fan-outs, output projections): the general path advances it (waits and
    -- children start there, conditions are evaluated there, a skipped step counts as done for its
    -- dependents, items are made there, an answer is projected there), as
    -- scheduler.services.waits and scheduler.services.saga write it.
    IF v_step.kind = 'item' THEN
        -- An item of a fan-out (scheduler.services.fanout): a failure is recorded as an action's
        -- is (the scan decides it); a success here only while it can neither settle the join nor
        -- free a slot for an item not started: another item is still unsettled, none waits to
        -- start, the fan-out still runs, and its definition's outcome is plain
        -- (scheduler.definitions.outcome_plain: its join is not `any`, its answer not projected).
        IF p_outcome = 'succeeded' AND (
            EXISTS (SELECT 1 FROM scheduler_stepdefinition d WHERE d.id = v_step.definition_id
                    AND NOT d.plain_outcome)
            OR EXISTS (SELECT 1 FROM scheduler_step g WHERE g.id = v_step.parent_id
                       AND (g.status <> 'waiting' OR g.error <> ''))
            OR EXISTS (SELECT 1 FROM scheduler_step i WHERE i.parent_id = v_step.parent_id
                       AND i.kind = 'item' AND i.status = 'pending')
            OR NOT EXISTS (SELECT 1 FROM scheduler_step i WHERE i.parent_id = v_step.parent_id
                           AND i.kind = 'item' AND i.id <> p_step
                           AND i.status IN ('waiting', 'dispatched', 'attempt_failed', 'unknown',
                                            'retry_wait', 'held'))) THEN
            RETURN 'fallback';
        END IF;
    ELSIF NOT v_job.plain THEN
        RETURN 'fallback';
    END IF;
    SELECT id, kind, deadline INTO v_attempt FROM scheduler_attempt
    WHERE step_id = p_step AND number = p_number AND finished_at IS NULL;
    IF NOT FOUND OR v_attempt.kind <> 'call' THEN
        RETURN 'fallback';
    END IF;

    -- Every guarded write below finds its row by its key and tests the guard `(...) IS TRUE`: a
    -- bare `status = 'dispatched'` (or `finished_at IS NULL`) matches the partial indexes on the
    -- live rows, which the planner prefers whenever its statistics say few rows are live (a quiet
    -- hour, a generic plan cached then) and then walks every live row to find one: the cost of
    -- each write grew with the backlog.
    v_late := v_now > v_attempt.deadline;
    UPDATE scheduler_attempt SET
        finished_at = v_now, outcome = p_outcome, decided_by = p_source,
        status_code = p_status_code, latency_ms = p_latency_ms, response_excerpt = p_excerpt,
        error = left(p_error, 2000),
        late_outcome = CASE WHEN v_late AND p_outcome = 'succeeded' THEN 'succeeded' ELSE '' END,
        late_at = CASE WHEN v_late AND p_outcome = 'succeeded' THEN v_now END
    WHERE id = v_attempt.id AND (finished_at IS NULL) IS TRUE;
    v_data := jsonb_build_object('latency_ms', p_latency_ms, 'status_code', p_status_code);
    IF v_late THEN
        v_data := v_data || '{"late": true}'::jsonb;
    END IF;

    IF p_outcome <> 'succeeded' THEN
        -- Where the outcome takes the step and the event saying so, as scheduler.transitions'
        -- OUTCOME_MOVES has them (generated: sas_outcome_status.sql, sas_event_kind.sql).
        v_to := sas_outcome_status(p_outcome);
        v_kind := sas_event_kind('outcome', p_outcome);
        UPDATE scheduler_step SET status = v_to,
            last_outcome = CASE WHEN v_to = 'unknown' THEN 'no_answer' ELSE p_outcome END,
            error = left(p_error, 2000), updated_at = v_now
        WHERE id = p_step AND (status = 'dispatched' AND attempt = p_number) IS TRUE;
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, p_step, v_kind, 'dispatched', v_to, p_number, NULL, p_source, p_error, v_data, v_now);
        RETURN 'done';
    END IF;

    UPDATE scheduler_step SET status = 'succeeded', output = p_output, error = '',
        last_outcome = 'succeeded', updated_at = v_now, finished_at = v_now
    WHERE id = p_step AND (status = 'dispatched' AND attempt = p_number) IS TRUE;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, p_step, sas_event_kind('step', 'succeeded'), 'dispatched', 'succeeded', p_number,
            NULL, p_source, '', v_data, v_now);
    IF v_step.kind = 'item' THEN
        RETURN 'done';  -- other items are still unsettled: the join waits for them
    END IF;

    -- The DAG advance: every pending step whose dependencies have all succeeded, oldest first.
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);

    IF NOT EXISTS (SELECT 1 FROM scheduler_step
                   WHERE job_id = v_job_id AND kind = 'action' AND status <> 'succeeded') THEN
        UPDATE scheduler_job SET status = 'succeeded', updated_at = v_now, finished_at = v_now,
            result = (SELECT jsonb_object_agg(name, output) FROM scheduler_step
                      WHERE job_id = v_job_id AND kind = 'action')
        WHERE id = v_job_id AND (status = 'running') IS TRUE;
        -- The completion callback, in the outbox with the job's last move (as
        -- scheduler.transitions.job_transition writes it).
        INSERT INTO scheduler_delivery (kind, key, target, receiver, payload, job_id, subscription_id, status,
                                        tries, next_try_at, last_status_code, last_error, created_at,
                                        delivered_at)
        SELECT 'callback', j.id::text || ':succeeded', j.callback_url, sas_url_receiver(j.callback_url),
               jsonb_build_object('id', j.id::text, 'workflow', w.name, 'status', 'succeeded',
                                  'result', j.result, 'finished_at', v_now),
               j.id, NULL, 'pending', 0, v_now, NULL, '', v_now, NULL
        FROM scheduler_job j JOIN scheduler_workflow w ON w.id = j.workflow_id
        WHERE j.id = v_job_id AND j.callback_url <> ''
        ON CONFLICT (key) DO NOTHING;
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, NULL, sas_event_kind('job', 'succeeded'), 'running', 'succeeded', NULL, NULL,
                p_source, '', '{}'::jsonb, v_now);
        -- The job held a concurrency key: the caller starts what waits for it once this commits
        -- (scheduler.transitions.key_freed, as job_transition sends it).
        IF v_job.concurrency_key <> '' THEN
            RETURN 'done:key_freed';
        END IF;
    END IF;
    RETURN 'done';
END
$fn$;
