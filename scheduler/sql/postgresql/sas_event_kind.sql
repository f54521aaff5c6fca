-- Generated from scheduler/transitions.py by scheduler/sqlgen.py
-- (`manage.py dbcode --generate`): do not edit. Mirrors STEP_EVENTS, JOB_EVENTS and OUTCOME_MOVES;
-- a test fails when this file differs from them.
CREATE OR REPLACE FUNCTION sas_event_kind(p_table text, p_key text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN CASE p_table || ':' || p_key
        WHEN 'step:compensated' THEN 'step_compensated'
        WHEN 'step:dispatched' THEN 'step_dispatched'
        WHEN 'step:failed' THEN 'step_failed'
        WHEN 'step:held' THEN 'step_held'
        WHEN 'step:retry_wait' THEN 'retry_scheduled'
        WHEN 'step:skipped' THEN 'step_skipped'
        WHEN 'step:succeeded' THEN 'step_succeeded'
        WHEN 'step:waiting' THEN 'step_waiting'
        WHEN 'job:cancelled' THEN 'job_cancelled'
        WHEN 'job:compensated' THEN 'job_compensated'
        WHEN 'job:compensating' THEN 'job_compensating'
        WHEN 'job:failed' THEN 'job_failed'
        WHEN 'job:needs_attention' THEN 'job_needs_attention'
        WHEN 'job:running' THEN 'job_running'
        WHEN 'job:succeeded' THEN 'job_succeeded'
        WHEN 'job:waiting' THEN 'job_waiting'
        WHEN 'outcome:business_failure' THEN 'step_business_failure'
        WHEN 'outcome:no_answer' THEN 'step_no_answer'
        WHEN 'outcome:not_happened' THEN 'step_not_happened'
        WHEN 'outcome:transient_failure' THEN 'step_transient_failure'
    END;
END
$fn$;
