-- The state machines, enforced for every writer: a status (an attempt's outcome) may only make the
-- moves of scheduler/transitions.py, as sas_move_allowed (generated from those tables) lists them.
-- The check is in each trigger's WHEN clause, so a permitted move costs no call of this function,
-- which only raises.
-- Mirrors: scheduler.transitions, scheduler.sqlgen.
CREATE OR REPLACE FUNCTION sas_status_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    v_from text;
    v_to text;
    v_machine text := TG_ARGV[0];
BEGIN
    IF v_machine = 'step' OR v_machine = 'job' THEN
        v_from := OLD.status; v_to := NEW.status;
    ELSIF OLD.outcome IS DISTINCT FROM NEW.outcome
          AND NOT sas_move_allowed('attempt', OLD.outcome, NEW.outcome) THEN
        v_from := OLD.outcome; v_to := NEW.outcome;
    ELSE
        v_machine := 'attempt_late'; v_from := OLD.late_outcome; v_to := NEW.late_outcome;
    END IF;
    RAISE EXCEPTION '% % cannot go from "%" to "%"', v_machine, TG_TABLE_NAME, v_from, v_to
        USING ERRCODE = 'check_violation',
              HINT = 'scheduler/transitions.py lists the moves each state machine allows.';
END
$fn$;

CREATE TRIGGER scheduler_step_status_guard BEFORE UPDATE OF status ON scheduler_step FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NOT sas_move_allowed('step', OLD.status, NEW.status))
    EXECUTE FUNCTION sas_status_guard('step');

CREATE TRIGGER scheduler_job_status_guard BEFORE UPDATE OF status ON scheduler_job FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NOT sas_move_allowed('job', OLD.status, NEW.status))
    EXECUTE FUNCTION sas_status_guard('job');

-- An attempt's outcome and the late outcome noted beside it: one trigger, the function says which.
CREATE TRIGGER scheduler_attempt_outcome_guard BEFORE UPDATE OF outcome, late_outcome ON scheduler_attempt
    FOR EACH ROW WHEN (
        (OLD.outcome IS DISTINCT FROM NEW.outcome AND NOT sas_move_allowed('attempt', OLD.outcome, NEW.outcome))
        OR (OLD.late_outcome IS DISTINCT FROM NEW.late_outcome
            AND NOT sas_move_allowed('attempt_late', OLD.late_outcome, NEW.late_outcome)))
    EXECUTE FUNCTION sas_status_guard('attempt');
