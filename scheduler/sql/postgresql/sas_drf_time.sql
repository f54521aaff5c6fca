-- Mirrors: scheduler.serializers.
-- A timestamp as the API writes one (scheduler.serializers.drf_datetime, in UTC): ISO 8601 with
-- a "Z", its microseconds left out when there are none, as Python's isoformat() does.
CREATE OR REPLACE FUNCTION sas_drf_time(p_at timestamptz) RETURNS text LANGUAGE sql STABLE AS $fn$
    SELECT CASE
        WHEN p_at IS NULL THEN NULL
        WHEN extract(microseconds FROM p_at)::bigint % 1000000 = 0
            THEN to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
        ELSE to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    END
$fn$;
