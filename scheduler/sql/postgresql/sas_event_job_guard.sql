-- Mirrors: scheduler.services.retention.
-- What the event table's foreign key to its job did, at commit, plus: an event for a job archived
-- already clears its archived_at, so that the job is archived again before it may be deleted.
CREATE OR REPLACE FUNCTION sas_event_job_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    archived timestamptz;
BEGIN
    -- What the foreign key did: the job exists, and stays until this transaction ends.
    SELECT archived_at INTO archived FROM scheduler_job WHERE id = NEW.job_id FOR KEY SHARE;
    IF NOT FOUND THEN
        -- As the foreign key's check: an event deleted again before the commit is no violation.
        IF EXISTS (SELECT 1 FROM scheduler_event WHERE id = NEW.id AND created_at = NEW.created_at) THEN
            RAISE foreign_key_violation
                USING MESSAGE = 'event names job ' || NEW.job_id || ', which does not exist';
        END IF;
        RETURN NULL;
    END IF;
    -- A job archived before this event: its archive line lacks it, so it is archived again.
    IF archived IS NOT NULL THEN
        UPDATE scheduler_job SET archived_at = NULL WHERE id = NEW.job_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER event_job_guard AFTER INSERT ON scheduler_event
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sas_event_job_guard();
