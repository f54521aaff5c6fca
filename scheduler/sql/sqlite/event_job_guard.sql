-- Mirrors: scheduler.services.retention.
-- SQLite's twin of postgresql/sas_event_job_guard.sql: one writer at a time, so no lock, and at once.
CREATE TRIGGER event_job_guard AFTER INSERT ON scheduler_event
BEGIN
    SELECT RAISE(ABORT, 'event names a job that does not exist')
    WHERE NOT EXISTS (SELECT 1 FROM scheduler_job WHERE id = NEW.job_id);
    UPDATE scheduler_job SET archived_at = NULL WHERE id = NEW.job_id AND archived_at IS NOT NULL;
END;
