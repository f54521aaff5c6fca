-- Mirrors: agents.broker.
-- A compact task into the broker's queue (django-q2's table), as ClaimByDeleteORM.enqueue_compact
-- writes it: the row `sas1 <timeout> <func> <args...>` (agents.broker.compact_row), announced on
-- `sas_tasks` only into a queue with nothing older waiting (a pusher with a backlog looks again by
-- itself; only an idle one needs waking). Returns the queue row. The other apps' database code
-- enqueues through this function and never names the broker's table.
CREATE OR REPLACE FUNCTION sas_enqueue(
    p_key text, p_func text, p_timeout integer, p_args bigint[], p_now timestamptz, p_notify boolean
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v_row bigint;
BEGIN
    INSERT INTO django_q_ormq (key, payload, lock)
    VALUES (p_key, 'sas1 ' || p_timeout || ' ' || p_func || ' ' || array_to_string(p_args, ' '), p_now)
    RETURNING id INTO v_row;
    -- Read from the newest row down (the primary key backwards): the oldest end of the table is
    -- the rows workers took (deleted, not yet vacuumed), which a scan from the start walked
    -- through at every enqueue (89-332 us in drains, against 6-10 us).
    IF p_notify AND (SELECT o.id FROM django_q_ormq o WHERE o.id < v_row AND o.key = p_key
                     ORDER BY o.id DESC LIMIT 1) IS NULL THEN
        PERFORM pg_notify('sas_tasks', '');
    END IF;
    RETURN v_row;
END
$fn$;
