-- Mirrors: scheduler.serializers, scheduler.selectors, scheduler.services.flow.
-- The job as the API shows it (scheduler.serializers.job_data: its steps, their attempts, its
-- callbacks), as JSON text built in one statement: NULL when there is no such job or the reader
-- may not see it (p_everyone: they read every job; else only those p_owner submitted). The API
-- answers a submission and a read of a job with it, without reading rows into Python and
-- rendering them (scheduler.selectors.job_json); tests/api/test_job_document.py holds it to the
-- Python rendering, field for field, for jobs of every kind of step.
CREATE OR REPLACE FUNCTION sas_job_document(p_job uuid, p_everyone boolean, p_owner integer)
RETURNS text LANGUAGE plpgsql STABLE AS $fn$
BEGIN
-- PL/pgSQL, not SQL: a function in SQL is parsed and planned again at every call, this one's
-- plan is kept for the session.
RETURN (SELECT json_build_object(
    'id', j.id,
    'workflow', w.name,
    'workflow_version', w.version,
    'status', j.status,
    'paused', j.paused_at IS NOT NULL,
    'at_risk', j.at_risk,
    'compensation_reason', j.compensation_reason,
    'submitter', u.username,
    'business_key', NULLIF(j.business_key, ''),
    'priority', j.priority,
    'rerun_of', j.rerun_of_id,
    'parent_job', j.parent_job_id,
    'parent_step', j.parent_step,
    'created_at', sas_drf_time(j.created_at),
    'updated_at', sas_drf_time(j.updated_at),
    'finished_at', sas_drf_time(j.finished_at),
    'input', j.input,
    'result', j.result,
    'paused_at', sas_drf_time(j.paused_at),
    'deadline', sas_drf_time(j.deadline),
    -- scheduler.services.flow.waiting_for
    'waiting_for', CASE
        WHEN j.status <> 'waiting' THEN NULL
        WHEN j.start_gate = 'debounce' THEN json_build_object(
            'kind', 'debounce', 'key', j.debounce_key, 'until', sas_drf_time(j.start_at))
        WHEN j.start_gate = 'throttle' THEN json_build_object(
            'kind', 'throttle', 'key', j.throttle_key, 'until', sas_drf_time(j.start_at))
        WHEN j.concurrency_key <> '' THEN json_build_object(
            'kind', 'concurrency', 'key', j.concurrency_key, 'limit', (w.concurrency ->> 'limit')::integer)
    END,
    'started_by_event', j.started_by_event,
    'callback_url', NULLIF(j.callback_url, ''),
    -- Only a job given a callback URL has callbacks (as scheduler.selectors.job_for_reading).
    'callbacks', COALESCE((
        SELECT json_agg(json_build_object(
            'job_status', d.payload -> 'status',
            'status', d.status,
            'tries', d.tries,
            'last_status_code', d.last_status_code,
            'last_error', d.last_error,
            'created_at', sas_drf_time(d.created_at),
            'next_try_at', sas_drf_time(d.next_try_at),
            'delivered_at', sas_drf_time(d.delivered_at)
        ) ORDER BY d.id)
        FROM scheduler_delivery d
        WHERE j.callback_url <> '' AND d.job_id = j.id AND d.kind = 'callback'), '[]'::json),
    'reruns', COALESCE((
        SELECT json_agg(r.id ORDER BY r.created_at) FROM scheduler_job r WHERE r.rerun_of_id = j.id
    ), '[]'::json),
    'steps', COALESCE((
        SELECT json_agg(json_build_object(
            'id', s.id,
            'name', s.name,
            'kind', s.kind,
            'compensates', s.compensates_id,
            'status', s.status,
            'operation_id', s.operation_id,
            'attempt_count', s.attempt,
            'calls', s.calls,
            'last_outcome', s.last_outcome,
            'type', d.kind,
            'pool', p.name,
            -- scheduler.serializers.waiting_for
            'waiting_for', CASE
                WHEN s.status <> 'waiting' THEN NULL
                WHEN d.kind = 'workflow' THEN json_build_object(
                    'kind', 'workflow', 'workflow', d.child_workflow, 'child_job', c.id,
                    'tries', s.attempt + 1)
                WHEN d.kind IN ('signal', 'approval') THEN (
                    CASE WHEN d.kind = 'signal' THEN jsonb_build_object('kind', 'signal', 'signal', d.signal)
                         ELSE jsonb_build_object('kind', 'approval', 'group', NULLIF(d."group", '')) END
                    -- scheduler.serializers.rendering._decision_times: the timeout, and the ladder.
                    || CASE WHEN s.waiting_since IS NULL THEN jsonb_build_object(
                            'timeout_at', sas_drf_time(s.deadline), 'escalation', NULL)
                       ELSE jsonb_build_object(
                            'timeout_at', sas_drf_time(
                                s.waiting_since + make_interval(secs => d.timeout_seconds)),
                            'escalation', CASE WHEN jsonb_array_length(d.escalation) = 0 THEN NULL
                                ELSE jsonb_build_object(
                                    'rung', s.escalation_rung,
                                    'rungs', jsonb_array_length(d.escalation),
                                    'group', NULLIF(s.escalation_group, ''),
                                    'next', CASE WHEN s.escalation_rung < jsonb_array_length(d.escalation)
                                        THEN jsonb_build_object(
                                            'do', d.escalation -> s.escalation_rung ->> 'do',
                                            'at', sas_drf_time(s.waiting_since + make_interval(
                                                secs => (d.escalation -> s.escalation_rung ->> 'after_seconds')::float8)))
                                        END) END) END)::json
                WHEN d.kind = 'timer' THEN json_build_object('kind', 'timer', 'until', sas_drf_time(s.deadline))
                WHEN (d.for_each <> '' OR d.kind = 'repeat') AND s.kind = 'action'
                    THEN json_build_object('kind', 'items')
                -- scheduler.services.capacity: a call waiting its turn, by what it waits for.
                WHEN s.not_before IS NOT NULL AND s.rate_key = '' THEN json_build_object(
                    'kind', 'backoff', 'until', sas_drf_time(s.not_before), 'pool', p.name)
                WHEN s.concurrency_key <> '' THEN json_build_object(
                    'kind', 'concurrency',
                    'key', substr(s.concurrency_key, strpos(s.concurrency_key, ':') + 1),
                    'limit', (d.concurrency ->> 'limit')::integer)
                WHEN s.rate_key <> '' THEN json_build_object(
                    'kind', 'rate', 'key', regexp_replace(s.rate_key, '^[^:]*:[^:]*:', ''), 'pool', p.name,
                    'until', sas_drf_time(s.not_before))
                ELSE json_build_object('kind', 'capacity', 'pool', p.name)
            END,
            -- scheduler.selectors.item_summaries: a fan-out's items (a repeat's iterations), in all
            -- and by status.
            'items', CASE WHEN (d.for_each <> '' OR d.kind = 'repeat') AND s.kind = 'action' THEN (
                SELECT jsonb_build_object('total', COALESCE(sum(g.n), 0))
                       || COALESCE(jsonb_object_agg(g.status, g.n), '{}'::jsonb)
                FROM (SELECT i.status, count(*) AS n FROM scheduler_step i
                      WHERE i.parent_id = s.id AND i.kind = 'item' GROUP BY i.status) g
            ) END,
            'deadline', sas_drf_time(s.deadline),
            'not_before', sas_drf_time(s.not_before),
            'output', s.output,
            'error', s.error,
            'reason', NULLIF(s.status_reason, ''),
            'input_override', s.input_override,
            'reused_from', s.reused_from_id,
            'child_job', c.id,
            'created_at', sas_drf_time(s.created_at),
            'updated_at', sas_drf_time(s.updated_at),
            'finished_at', sas_drf_time(s.finished_at),
            'attempts', COALESCE((
                SELECT json_agg(json_build_object(
                    'number', a.number,
                    'kind', a.kind,
                    'endpoint', a.endpoint_url,
                    'pool', ap.name,
                    'policy_version', a.policy_version,
                    'dispatched_at', sas_drf_time(a.dispatched_at),
                    'deadline', sas_drf_time(a.deadline),
                    'started_at', sas_drf_time(a.started_at),
                    'finished_at', sas_drf_time(a.finished_at),
                    'outcome', a.outcome,
                    'decided_by', a.decided_by,
                    'status_code', a.status_code,
                    'latency_ms', a.latency_ms,
                    'response_excerpt', a.response_excerpt,
                    'error', a.error,
                    'late_outcome', a.late_outcome,
                    'late_at', sas_drf_time(a.late_at),
                    'heartbeat_at', sas_drf_time(a.heartbeat_at),
                    'heartbeat_details', a.heartbeat_details,
                    'retry_after_seconds', a.retry_after_seconds
                ) ORDER BY a.number)
                FROM scheduler_attempt a CROSS JOIN LATERAL sas_agent_pool(a.pool_id) ap
                WHERE a.step_id = s.id), '[]'::json)
        ) ORDER BY s.id)
        FROM scheduler_step s
        JOIN scheduler_stepdefinition d ON d.id = s.definition_id
        LEFT JOIN LATERAL sas_agent_pool(s.pool_id) p ON true
        -- scheduler.serializers.child_job: the latest child job a sub-workflow step started.
        LEFT JOIN LATERAL (
            SELECT cj.id FROM scheduler_job cj
            WHERE d.kind = 'workflow' AND s.kind = 'action'
              AND cj.parent_job_id = s.job_id AND cj.parent_step = s.name
            ORDER BY cj.parent_try DESC LIMIT 1
        ) c ON true
        WHERE s.job_id = j.id AND s.item_index IS NULL), '[]'::json)
)::text
FROM scheduler_job j
JOIN scheduler_workflow w ON w.id = j.workflow_id
LEFT JOIN auth_user u ON u.id = j.submitter_id
WHERE j.id = p_job AND (p_everyone OR j.submitter_id = p_owner));
END
$fn$;
