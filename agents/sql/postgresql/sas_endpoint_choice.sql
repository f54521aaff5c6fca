-- Mirrors: agents.health.
-- The endpoint of a first dispatch, as agents.health.choose_endpoint picks it: none for a python
-- pool (NULL and ''); else the healthy enabled endpoints (circuit closed) spread by `p_spread`
-- (the step's id), else the enabled one whose cool-down ends first (NULL and '' when the pool has
-- none enabled). `p_kind` is the pool's kind, which the caller has already read (sas_agent_pool).
-- `asked_until`: when no endpoint is healthy, the time the chosen one asked for no calls till
-- (Retry-After; AgentEndpoint.wait_asked_until), which its caller waits for.
CREATE OR REPLACE FUNCTION sas_endpoint_choice(
    p_pool bigint, p_kind text, p_spread bigint, p_now timestamptz,
    OUT endpoint_id bigint, OUT url text, OUT asked_until timestamptz
) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    v_healthy integer;
BEGIN
    url := '';
    IF p_kind = 'python' THEN
        RETURN;
    END IF;
    SELECT count(*) INTO v_healthy FROM agents_agentendpoint e
    WHERE e.pool_id = p_pool AND e.enabled
      AND (e.circuit_open_until IS NULL OR e.circuit_open_until <= p_now);
    IF v_healthy > 0 THEN
        SELECT e.id, e.url INTO endpoint_id, url FROM agents_agentendpoint e
        WHERE e.pool_id = p_pool AND e.enabled
          AND (e.circuit_open_until IS NULL OR e.circuit_open_until <= p_now)
        ORDER BY e.id OFFSET (p_spread % v_healthy) LIMIT 1;
    ELSE
        SELECT e.id, e.url, e.wait_asked_until INTO endpoint_id, url, asked_until FROM agents_agentendpoint e
        WHERE e.pool_id = p_pool AND e.enabled
        ORDER BY COALESCE(e.circuit_open_until, p_now), e.id LIMIT 1;
        url := COALESCE(url, '');
    END IF;
END
$fn$;
