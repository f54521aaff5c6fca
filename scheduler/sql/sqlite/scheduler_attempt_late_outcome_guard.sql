-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_TRANSITIONS, JOB_TRANSITIONS,
-- ATTEMPT_TRANSITIONS and ATTEMPT_LATE_OUTCOMES; a test fails when this file differs from them.
CREATE TRIGGER scheduler_attempt_late_outcome_guard BEFORE UPDATE OF late_outcome ON scheduler_attempt
FOR EACH ROW WHEN OLD.late_outcome <> NEW.late_outcome
    AND (OLD.late_outcome || '>' || NEW.late_outcome) NOT IN ('>business_failure', '>not_happened', '>succeeded', '>transient_failure')
BEGIN
    SELECT RAISE(ABORT, 'attempt_late late_outcome: a move not in scheduler.transitions');
END;
