-- Mirrors: scheduler.services.dispatch, scheduler.services.capacity.
-- The dispatch of a job's ready steps, as step_dispatch writes it (the intent, the attempt, the compact
-- queue row, the event), with the endpoint chosen as choose_endpoint chooses it and the steps of
-- limited pools parked for the capacity pump. The pool, the endpoint and the queue row are the
-- agents app's: read and written through its functions (agents/sql/postgresql/: sas_agent_pool,
-- sas_endpoint_choice, sas_enqueue), as the Python reaches them through agents.health and
-- agents.broker.
CREATE OR REPLACE FUNCTION sas_dispatch_ready(
    p_job uuid, p_now timestamptz, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_job_id uuid := p_job;
    v_now timestamptz := p_now;
    r record;
    v_endpoint record;
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
               ap.kind AS pool_kind, ap.name AS pool_name, ap.limited
        FROM scheduler_step s
        JOIN scheduler_stepdefinition d ON d.id = s.definition_id
        JOIN supervisor_remediationpolicy p ON p.id = d.policy_id
        CROSS JOIN LATERAL sas_agent_pool(s.pool_id) ap
        -- `(...) IS TRUE` keeps a status test off the partial indexes on status (see
        -- sas_record_outcome): the job's few steps are found by job_id, not among every pending one.
        WHERE s.job_id = v_job_id AND (s.kind = 'action' AND s.status = 'pending') IS TRUE
          AND NOT EXISTS (
              SELECT 1 FROM jsonb_array_elements_text(d.depends_on) AS dep(name)
              WHERE NOT EXISTS (
                  SELECT 1 FROM scheduler_step s2
                  WHERE s2.job_id = v_job_id AND s2.kind = 'action' AND s2.name = dep.name
                    AND s2.status = 'succeeded'))
        ORDER BY s.id
    LOOP
        -- A pool with limits takes no call here: the step waits for the capacity pump
        -- (scheduler.services.capacity), as scheduler.services.dispatch parks it.
        IF r.limited THEN
            SELECT CASE WHEN count(*) = 0 THEN 'ready: no dependencies'
                        ELSE string_agg(dep, ', ' ORDER BY ord) || ' succeeded' END
            INTO v_reason FROM jsonb_array_elements_text(r.depends_on) WITH ORDINALITY AS t(dep, ord);
            UPDATE scheduler_step SET status = 'waiting', deadline = NULL, not_before = NULL,
                updated_at = v_now
            WHERE id = r.id AND (status = 'pending' AND attempt = r.attempt) IS TRUE;
            INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt,
                                         actor_id, source, reason, data, created_at)
            VALUES (v_job_id, r.id, sas_event_kind('step', 'waiting'), 'pending', 'waiting', r.attempt, NULL,
                    p_source,
                    v_reason || '; pool ' || r.pool_name || ' has a limit: waiting for capacity',
                    jsonb_build_object('pool', r.pool_name), v_now);
            CONTINUE;
        END IF;
        -- The endpoint (HTTP and queue pools), as agents.health.choose_endpoint picks it for a
        -- first dispatch.
        v_endpoint := sas_endpoint_choice(r.pool_id, r.pool_kind, r.id, v_now);
        -- Only an endpoint that asked for no calls till later is left: the step waits for that
        -- time, holding no worker (scheduler.services.capacity.asked_to_wait).
        IF v_endpoint.asked_until IS NOT NULL AND v_endpoint.asked_until > v_now THEN
            UPDATE scheduler_step SET status = 'waiting', deadline = NULL, not_before = v_endpoint.asked_until,
                updated_at = v_now
            WHERE id = r.id AND (status = 'pending' AND attempt = r.attempt) IS TRUE;
            INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt,
                                         actor_id, source, reason, data, created_at)
            VALUES (v_job_id, r.id, sas_event_kind('step', 'waiting'), 'pending', 'waiting', r.attempt, NULL,
                    p_source,
                    'every endpoint of pool ' || r.pool_name || ' asked for no calls before '
                        || sas_drf_time(v_endpoint.asked_until),
                    jsonb_build_object('pool', r.pool_name, 'until', sas_drf_time(v_endpoint.asked_until)),
                    v_now);
            CONTINUE;
        END IF;
        v_number := r.attempt + 1;
        v_deadline := v_now + make_interval(secs => r.timeout_seconds);
        UPDATE scheduler_step SET status = 'dispatched', attempt = v_number, calls = r.calls + 1,
            endpoint_id = v_endpoint.endpoint_id, deadline = v_deadline, not_before = NULL,
            first_dispatched_at = COALESCE(r.first_dispatched_at, v_now), updated_at = v_now
        WHERE id = r.id AND (status = 'pending' AND attempt = r.attempt) IS TRUE;
        -- Its task, announced into a queue with nothing older waiting (agents.broker).
        v_row := sas_enqueue(p_queue_key, p_task_func,
                             GREATEST(p_task_floor, trunc(r.timeout_seconds)::integer + 30),
                             ARRAY[r.id, v_number], v_now, p_notify);
        INSERT INTO scheduler_attempt (step_id, number, kind, pool_id, endpoint_id, endpoint_url,
            policy_version, dispatched_at, deadline, started_at, queue_row, finished_at, outcome,
            decided_by, status_code, latency_ms, response_excerpt, error, late_outcome, late_at)
        VALUES (r.id, v_number, 'call', r.pool_id, v_endpoint.endpoint_id, v_endpoint.url, r.policy_version,
            v_now, v_deadline, NULL, v_row, NULL, '', '', NULL, NULL, '', '', '', NULL);
        SELECT CASE WHEN count(*) = 0 THEN 'ready: no dependencies'
                    ELSE string_agg(dep, ', ' ORDER BY ord) || ' succeeded' END
        INTO v_reason FROM jsonb_array_elements_text(r.depends_on) WITH ORDINALITY AS t(dep, ord);
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, r.id, sas_event_kind('step', 'dispatched'), 'pending', 'dispatched', v_number,
                NULL, p_source, v_reason,
                jsonb_build_object('kind', 'call', 'pool', r.pool_name, 'endpoint', v_endpoint.url,
                                   'policy', r.policy_name, 'policy_version', r.policy_version,
                                   'deadline', v_deadline),
                v_now);
        v_count := v_count + 1;
    END LOOP;

    RETURN v_count;
END
$fn$;
