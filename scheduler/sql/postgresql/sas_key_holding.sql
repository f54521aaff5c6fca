-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors KEY_HOLDING, the statuses in which a job
-- holds its concurrency key (scheduler.services.flow); a test fails when this file differs.
CREATE OR REPLACE FUNCTION sas_key_holding()
RETURNS text[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN ARRAY['compensating', 'needs_attention', 'pending', 'running']::text[];
END
$fn$;
