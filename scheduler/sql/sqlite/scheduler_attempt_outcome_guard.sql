-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_TRANSITIONS, JOB_TRANSITIONS,
-- ATTEMPT_TRANSITIONS and ATTEMPT_LATE_OUTCOMES; a test fails when this file differs from them.
CREATE TRIGGER scheduler_attempt_outcome_guard BEFORE UPDATE OF outcome ON scheduler_attempt
FOR EACH ROW WHEN OLD.outcome <> NEW.outcome
    AND (OLD.outcome || '>' || NEW.outcome) NOT IN ('>business_failure', '>no_answer', '>not_happened', '>succeeded', '>superseded', '>transient_failure')
BEGIN
    SELECT RAISE(ABORT, 'attempt outcome: a move not in scheduler.transitions');
END;
