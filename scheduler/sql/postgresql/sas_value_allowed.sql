-- Generated from the models' vocabulary constraints (scheduler.sqlgen.VOCABULARIES) by
-- scheduler/sqlgen.py (`manage.py dbcode --generate`): do not edit. The same constraints, by the
-- same names, as one call each of a compiled function (see scheduler.sqlgen.pg_value_allowed).
CREATE OR REPLACE FUNCTION sas_value_allowed(p_constraint text, p_value text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN CASE p_constraint
        WHEN 'event_kind_valid' THEN p_value = ANY (ARRAY['approval_requested', 'call_accepted', 'child_compensating', 'child_failed', 'child_started', 'child_succeeded', 'deadline_extended', 'delivery_ignored', 'items_started', 'iteration_scheduled', 'iteration_started', 'iterations_exhausted', 'job_at_risk', 'job_cancelled', 'job_compensated', 'job_compensating', 'job_failed', 'job_needs_attention', 'job_paused', 'job_resumed', 'job_running', 'job_scheduled', 'job_submitted', 'job_succeeded', 'job_waiting', 'join_failed', 'join_met', 'late_outcome_ignored', 'late_success', 'late_success_noted', 'operator_cancel', 'operator_compensate', 'operator_rerun', 'operator_resolve', 'operator_retry', 'reply_dead_lettered', 'retry_scheduled', 'signal_received', 'step_abandoned', 'step_approved', 'step_business_failure', 'step_cancel_requested', 'step_cancel_sent', 'step_compensated', 'step_dispatched', 'step_failed', 'step_held', 'step_no_answer', 'step_not_happened', 'step_reconcile_failed', 'step_reconciled', 'step_rejected', 'step_resolved', 'step_signalled', 'step_skipped', 'step_succeeded', 'step_timed_out', 'step_transient_failure', 'step_waiting', 'timer_fired', 'until_met', 'wait_escalated', 'wait_reminded', 'wait_timed_out']::text[])
        WHEN 'step_status_valid' THEN p_value = ANY (ARRAY['attempt_failed', 'compensated', 'dispatched', 'failed', 'held', 'pending', 'retry_wait', 'skipped', 'succeeded', 'unknown', 'waiting']::text[])
        WHEN 'step_kind_valid' THEN p_value = ANY (ARRAY['action', 'compensation', 'item']::text[])
        WHEN 'job_status_valid' THEN p_value = ANY (ARRAY['cancelled', 'compensated', 'compensating', 'failed', 'needs_attention', 'pending', 'running', 'succeeded', 'waiting']::text[])
        WHEN 'attempt_outcome_valid' THEN p_value = ANY (ARRAY['', 'business_failure', 'no_answer', 'not_happened', 'succeeded', 'superseded', 'transient_failure']::text[])
        WHEN 'attempt_kind_valid' THEN p_value = ANY (ARRAY['call', 'cancel', 'reconcile']::text[])
    END;
END
$fn$;

ALTER TABLE scheduler_event DROP CONSTRAINT IF EXISTS event_kind_valid,
    ADD CONSTRAINT event_kind_valid CHECK (sas_value_allowed('event_kind_valid', kind)) NOT VALID;
ALTER TABLE scheduler_step DROP CONSTRAINT IF EXISTS step_status_valid,
    ADD CONSTRAINT step_status_valid CHECK (sas_value_allowed('step_status_valid', status)) NOT VALID;
ALTER TABLE scheduler_step DROP CONSTRAINT IF EXISTS step_kind_valid,
    ADD CONSTRAINT step_kind_valid CHECK (sas_value_allowed('step_kind_valid', kind)) NOT VALID;
ALTER TABLE scheduler_job DROP CONSTRAINT IF EXISTS job_status_valid,
    ADD CONSTRAINT job_status_valid CHECK (sas_value_allowed('job_status_valid', status)) NOT VALID;
ALTER TABLE scheduler_attempt DROP CONSTRAINT IF EXISTS attempt_outcome_valid,
    ADD CONSTRAINT attempt_outcome_valid CHECK (sas_value_allowed('attempt_outcome_valid', outcome)) NOT VALID;
ALTER TABLE scheduler_attempt DROP CONSTRAINT IF EXISTS attempt_kind_valid,
    ADD CONSTRAINT attempt_kind_valid CHECK (sas_value_allowed('attempt_kind_valid', kind)) NOT VALID;
