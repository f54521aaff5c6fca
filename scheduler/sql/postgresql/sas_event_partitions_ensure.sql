-- Mirrors: scheduler.partitions.
CREATE OR REPLACE FUNCTION sas_event_partitions_ensure(p_from timestamptz, p_to timestamptz)
RETURNS SETOF text LANGUAGE plpgsql AS $$
-- Creates the monthly partitions of scheduler_event covering [p_from, p_to] (UTC months) that do
-- not exist yet, and returns their names. Run at migrate time and by the daily retention chore,
-- which asks for two months ahead.
DECLARE
    v_month timestamp := date_trunc('month', p_from AT TIME ZONE 'UTC');
    v_name text;
BEGIN
    WHILE v_month <= p_to AT TIME ZONE 'UTC' LOOP
        v_name := 'scheduler_event_' || to_char(v_month, '"y"YYYY"m"MM');
        IF to_regclass(v_name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF scheduler_event FOR VALUES FROM (%L) TO (%L)',
                           v_name, v_month AT TIME ZONE 'UTC', (v_month + interval '1 month') AT TIME ZONE 'UTC');
            RETURN NEXT v_name;
        END IF;
        v_month := v_month + interval '1 month';
    END LOOP;
END
$$;
