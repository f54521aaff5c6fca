-- Mirrors: agents.models.
-- A pool as the other apps' database code reads it: its kind, its name, and whether it has
-- limits (AgentPool.limited), so that no other app's SQL names this app's tables. A set-returning
-- SQL function, STABLE and not STRICT: the planner inlines it into the caller's query as the
-- join it replaces (`CROSS JOIN LATERAL sas_agent_pool(s.pool_id) ap`), so it costs nothing.
CREATE OR REPLACE FUNCTION sas_agent_pool(p_pool bigint)
RETURNS TABLE (id bigint, kind text, name text, limited boolean)
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT ap.id, ap.kind::text, ap.name::text, (ap.max_in_flight IS NOT NULL OR ap.max_per_second IS NOT NULL
            OR ap.rate IS NOT NULL)
    FROM agents_agentpool ap
    WHERE ap.id = p_pool
$fn$;
