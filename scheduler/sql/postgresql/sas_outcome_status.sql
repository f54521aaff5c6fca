-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_EVENTS, JOB_EVENTS and OUTCOME_MOVES;
-- a test fails when this file differs from them.
CREATE OR REPLACE FUNCTION sas_outcome_status(p_outcome text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN CASE p_outcome
        WHEN 'business_failure' THEN 'attempt_failed'
        WHEN 'no_answer' THEN 'unknown'
        WHEN 'not_happened' THEN 'attempt_failed'
        WHEN 'transient_failure' THEN 'attempt_failed'
    END;
END
$fn$;
