-- Generated from scheduler/outbox.py (REACTION_KINDS) by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Queues each event of those kinds, whoever writes it,
-- for the supervisor's reader (supervisor.alerts.reactions_handle), in the event's transaction.
CREATE TRIGGER scheduler_event_reactions AFTER INSERT ON scheduler_event
FOR EACH ROW WHEN NEW.kind IN ('approval_requested', 'job_compensated', 'job_failed', 'step_held', 'wait_escalated', 'wait_reminded')
BEGIN
    INSERT INTO scheduler_eventreaction (event_id, kind, job_id, step_id, attempt, reason, data, created_at)
    VALUES (NEW.id, NEW.kind, NEW.job_id, NEW.step_id, NEW.attempt, NEW.reason, NEW.data, NEW.created_at);
END;
