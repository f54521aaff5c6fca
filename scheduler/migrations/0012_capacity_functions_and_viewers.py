"""Capacity, reruns, schedules, search and the viewer role, in the database's functions and roles.

- `sas_dispatch_ready` parks the steps of pools with limits (`waiting`) instead of dispatching
  them: the capacity pump dispatches them (scheduler.services.capacity).
- `sas_submit` takes the job's business key and priority; its previous signature stays, as a
  wrapper, for processes of the previous release until they restart.
- The `viewers` group reads every job, the console and the definitions; operators and
  administrators get that permission too.
- On PostgreSQL, a GIN index on the jobs' input serves the search by an input field.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

SUBMIT = r"""
CREATE OR REPLACE FUNCTION sas_submit(
    p_workflow text, p_input jsonb, p_submitter integer, p_key text, p_hash text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean,
    p_callback_url text, p_trace_parent text, p_business_key text, p_priority integer
) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := statement_timestamp();
    v_wf record;
    v_job_id uuid := gen_random_uuid();
BEGIN
    SELECT id, name, version, deadline_seconds INTO v_wf FROM scheduler_workflow
    WHERE name = p_workflow ORDER BY version DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A job is created running: its first steps are dispatched in this same transaction.
    INSERT INTO scheduler_job (id, workflow_id, status, input, result, submitter_id, idempotency_key,
        request_hash, compensation_reason, paused_at, deadline, callback_url, trace_parent, business_key,
        priority, rerun_of_id, created_at, updated_at, finished_at)
    VALUES (v_job_id, v_wf.id, 'running', p_input, NULL, p_submitter, p_key, p_hash, '', NULL,
        CASE WHEN v_wf.deadline_seconds IS NOT NULL AND v_wf.deadline_seconds > 0
             THEN v_now + make_interval(secs => v_wf.deadline_seconds) END,
        p_callback_url, p_trace_parent, p_business_key, p_priority, NULL, v_now, v_now, NULL);
    INSERT INTO scheduler_step (job_id, definition_id, name, kind, compensates_id, status, operation_id,
        attempt, calls, last_outcome, pool_id, endpoint_id, deadline, not_before, first_dispatched_at,
        output, error, input_override, reused_from_id, created_at, updated_at, finished_at)
    SELECT v_job_id, d.id, d.name, 'action', NULL, 'pending', gen_random_uuid()::text, 0, 0, '',
        d.pool_id, NULL, NULL, NULL, NULL, NULL, '', NULL, NULL, v_now, v_now, NULL
    FROM scheduler_stepdefinition d WHERE d.workflow_id = v_wf.id ORDER BY d.position;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, NULL, 'job_submitted', '', 'running', NULL, p_submitter, p_source, '',
            jsonb_build_object('workflow', v_wf.name, 'version', v_wf.version), v_now);
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);
    RETURN v_job_id;
END
$fn$;
"""

OLD_SUBMIT_WRAPPER = r"""
CREATE OR REPLACE FUNCTION sas_submit(
    p_workflow text, p_input jsonb, p_submitter integer, p_key text, p_hash text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean,
    p_callback_url text, p_trace_parent text
) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT sas_submit(p_workflow, p_input, p_submitter, p_key, p_hash, p_source, p_queue_key,
                      p_task_func, p_task_floor, p_notify, p_callback_url, p_trace_parent, '', 0);
$fn$;
"""

DROP_NEW_SUBMIT = """
DROP FUNCTION IF EXISTS sas_submit(text, jsonb, integer, text, text, text, text, text, integer, boolean,
                                   text, text, text, integer);
"""

DISPATCH = r"""CREATE OR REPLACE FUNCTION sas_dispatch_ready(
    p_job uuid, p_now timestamptz, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_job_id uuid := p_job;
    v_now timestamptz := p_now;
    r record;
    v_healthy integer;
    v_ep_id bigint;
    v_ep_url text;
    v_number integer;
    v_deadline timestamptz;
    v_row bigint;
    v_reason text;
    v_count integer := 0;
BEGIN
    -- Every pending action step whose dependencies have all succeeded, oldest first: its intent,
    -- its attempt, its task (a compact queue row) and its event, as scheduler.services.dispatch
    -- writes them. The caller holds the job's row lock.
    FOR r IN
        SELECT s.id, s.attempt, s.calls, s.first_dispatched_at, s.pool_id, d.depends_on,
               p.timeout_seconds, p.version AS policy_version, p.name AS policy_name,
               ap.kind AS pool_kind, ap.name AS pool_name,
               (ap.max_in_flight IS NOT NULL OR ap.max_per_second IS NOT NULL) AS limited
        FROM scheduler_step s
        JOIN scheduler_stepdefinition d ON d.id = s.definition_id
        JOIN supervisor_remediationpolicy p ON p.id = d.policy_id
        JOIN agents_agentpool ap ON ap.id = s.pool_id
        WHERE s.job_id = v_job_id AND s.kind = 'action' AND s.status = 'pending'
          AND NOT EXISTS (
              SELECT 1 FROM jsonb_array_elements_text(d.depends_on) AS dep(name)
              WHERE NOT EXISTS (
                  SELECT 1 FROM scheduler_step s2
                  WHERE s2.job_id = v_job_id AND s2.kind = 'action' AND s2.name = dep.name
                    AND s2.status = 'succeeded'))
        ORDER BY s.id
    LOOP
        -- A pool with limits takes no call here: the step waits for the capacity pump
        -- (scheduler.services.capacity), as scheduler.services.dispatch parks it.
        IF r.limited THEN
            SELECT CASE WHEN count(*) = 0 THEN 'ready: no dependencies'
                        ELSE string_agg(dep, ', ' ORDER BY ord) || ' succeeded' END
            INTO v_reason FROM jsonb_array_elements_text(r.depends_on) WITH ORDINALITY AS t(dep, ord);
            UPDATE scheduler_step SET status = 'waiting', deadline = NULL, not_before = NULL,
                updated_at = v_now
            WHERE id = r.id AND status = 'pending' AND attempt = r.attempt;
            INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt,
                                         actor_id, source, reason, data, created_at)
            VALUES (v_job_id, r.id, 'step_waiting', 'pending', 'waiting', r.attempt, NULL, p_source,
                    v_reason || '; pool ' || r.pool_name || ' has a limit: waiting for capacity',
                    jsonb_build_object('pool', r.pool_name), v_now);
            CONTINUE;
        END IF;
        -- The endpoint (HTTP and queue pools), as agents.health.choose_endpoint picks it for a
        -- first dispatch: the
        -- healthy enabled endpoints spread by step id, else the one whose cool-down ends first.
        v_ep_id := NULL;
        v_ep_url := '';
        IF r.pool_kind <> 'python' THEN
            SELECT count(*) INTO v_healthy FROM agents_agentendpoint
            WHERE pool_id = r.pool_id AND enabled
              AND (circuit_open_until IS NULL OR circuit_open_until <= v_now);
            IF v_healthy > 0 THEN
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                  AND (circuit_open_until IS NULL OR circuit_open_until <= v_now)
                ORDER BY id OFFSET (r.id % v_healthy) LIMIT 1;
            ELSE
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                ORDER BY COALESCE(circuit_open_until, v_now), id LIMIT 1;
                v_ep_url := COALESCE(v_ep_url, '');
            END IF;
        END IF;
        v_number := r.attempt + 1;
        v_deadline := v_now + make_interval(secs => r.timeout_seconds);
        UPDATE scheduler_step SET status = 'dispatched', attempt = v_number, calls = r.calls + 1,
            endpoint_id = v_ep_id, deadline = v_deadline, not_before = NULL,
            first_dispatched_at = COALESCE(r.first_dispatched_at, v_now), updated_at = v_now
        WHERE id = r.id AND status = 'pending' AND attempt = r.attempt;
        INSERT INTO django_q_ormq (key, payload, lock)
        VALUES (p_queue_key,
                'sas1 ' || GREATEST(p_task_floor, trunc(r.timeout_seconds)::integer + 30) || ' '
                    || p_task_func || ' ' || r.id || ' ' || v_number,
                v_now)
        RETURNING id INTO v_row;
        IF p_notify AND NOT EXISTS (SELECT 1 FROM django_q_ormq WHERE key = p_queue_key AND id <> v_row) THEN
            PERFORM pg_notify('sas_tasks', '');
        END IF;
        INSERT INTO scheduler_attempt (step_id, number, kind, pool_id, endpoint_id, endpoint_url,
            policy_version, dispatched_at, deadline, started_at, queue_row, finished_at, outcome,
            decided_by, status_code, latency_ms, response_excerpt, error, late_outcome, late_at)
        VALUES (r.id, v_number, 'call', r.pool_id, v_ep_id, v_ep_url, r.policy_version, v_now,
            v_deadline, NULL, v_row, NULL, '', '', NULL, NULL, '', '', '', NULL);
        SELECT CASE WHEN count(*) = 0 THEN 'ready: no dependencies'
                    ELSE string_agg(dep, ', ' ORDER BY ord) || ' succeeded' END
        INTO v_reason FROM jsonb_array_elements_text(r.depends_on) WITH ORDINALITY AS t(dep, ord);
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, r.id, 'step_dispatched', 'pending', 'dispatched', v_number, NULL, p_source,
                v_reason,
                jsonb_build_object('kind', 'call', 'pool', r.pool_name, 'endpoint', v_ep_url,
                                   'policy', r.policy_name, 'policy_version', r.policy_version,
                                   'deadline', v_deadline),
                v_now);
        v_count := v_count + 1;
    END LOOP;

    RETURN v_count;
END
$fn$;
"""

PREVIOUS_DISPATCH = r"""CREATE OR REPLACE FUNCTION sas_dispatch_ready(
    p_job uuid, p_now timestamptz, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    v_job_id uuid := p_job;
    v_now timestamptz := p_now;
    r record;
    v_healthy integer;
    v_ep_id bigint;
    v_ep_url text;
    v_number integer;
    v_deadline timestamptz;
    v_row bigint;
    v_reason text;
    v_count integer := 0;
BEGIN
    -- Every pending action step whose dependencies have all succeeded, oldest first: its intent,
    -- its attempt, its task (a compact queue row) and its event, as scheduler.services.dispatch
    -- writes them. The caller holds the job's row lock.
    FOR r IN
        SELECT s.id, s.attempt, s.calls, s.first_dispatched_at, s.pool_id, d.depends_on,
               p.timeout_seconds, p.version AS policy_version, p.name AS policy_name,
               ap.kind AS pool_kind, ap.name AS pool_name
        FROM scheduler_step s
        JOIN scheduler_stepdefinition d ON d.id = s.definition_id
        JOIN supervisor_remediationpolicy p ON p.id = d.policy_id
        JOIN agents_agentpool ap ON ap.id = s.pool_id
        WHERE s.job_id = v_job_id AND s.kind = 'action' AND s.status = 'pending'
          AND NOT EXISTS (
              SELECT 1 FROM jsonb_array_elements_text(d.depends_on) AS dep(name)
              WHERE NOT EXISTS (
                  SELECT 1 FROM scheduler_step s2
                  WHERE s2.job_id = v_job_id AND s2.kind = 'action' AND s2.name = dep.name
                    AND s2.status = 'succeeded'))
        ORDER BY s.id
    LOOP
        -- The endpoint (HTTP and queue pools), as agents.health.choose_endpoint picks it for a
        -- first dispatch: the
        -- healthy enabled endpoints spread by step id, else the one whose cool-down ends first.
        v_ep_id := NULL;
        v_ep_url := '';
        IF r.pool_kind <> 'python' THEN
            SELECT count(*) INTO v_healthy FROM agents_agentendpoint
            WHERE pool_id = r.pool_id AND enabled
              AND (circuit_open_until IS NULL OR circuit_open_until <= v_now);
            IF v_healthy > 0 THEN
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                  AND (circuit_open_until IS NULL OR circuit_open_until <= v_now)
                ORDER BY id OFFSET (r.id % v_healthy) LIMIT 1;
            ELSE
                SELECT id, url INTO v_ep_id, v_ep_url FROM agents_agentendpoint
                WHERE pool_id = r.pool_id AND enabled
                ORDER BY COALESCE(circuit_open_until, v_now), id LIMIT 1;
                v_ep_url := COALESCE(v_ep_url, '');
            END IF;
        END IF;
        v_number := r.attempt + 1;
        v_deadline := v_now + make_interval(secs => r.timeout_seconds);
        UPDATE scheduler_step SET status = 'dispatched', attempt = v_number, calls = r.calls + 1,
            endpoint_id = v_ep_id, deadline = v_deadline, not_before = NULL,
            first_dispatched_at = COALESCE(r.first_dispatched_at, v_now), updated_at = v_now
        WHERE id = r.id AND status = 'pending' AND attempt = r.attempt;
        INSERT INTO django_q_ormq (key, payload, lock)
        VALUES (p_queue_key,
                'sas1 ' || GREATEST(p_task_floor, trunc(r.timeout_seconds)::integer + 30) || ' '
                    || p_task_func || ' ' || r.id || ' ' || v_number,
                v_now)
        RETURNING id INTO v_row;
        IF p_notify AND NOT EXISTS (SELECT 1 FROM django_q_ormq WHERE key = p_queue_key AND id <> v_row) THEN
            PERFORM pg_notify('sas_tasks', '');
        END IF;
        INSERT INTO scheduler_attempt (step_id, number, kind, pool_id, endpoint_id, endpoint_url,
            policy_version, dispatched_at, deadline, started_at, queue_row, finished_at, outcome,
            decided_by, status_code, latency_ms, response_excerpt, error, late_outcome, late_at)
        VALUES (r.id, v_number, 'call', r.pool_id, v_ep_id, v_ep_url, r.policy_version, v_now,
            v_deadline, NULL, v_row, NULL, '', '', NULL, NULL, '', '', '', NULL);
        SELECT CASE WHEN count(*) = 0 THEN 'ready: no dependencies'
                    ELSE string_agg(dep, ', ' ORDER BY ord) || ' succeeded' END
        INTO v_reason FROM jsonb_array_elements_text(r.depends_on) WITH ORDINALITY AS t(dep, ord);
        INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                     source, reason, data, created_at)
        VALUES (v_job_id, r.id, 'step_dispatched', 'pending', 'dispatched', v_number, NULL, p_source,
                v_reason,
                jsonb_build_object('kind', 'call', 'pool', r.pool_name, 'endpoint', v_ep_url,
                                   'policy', r.policy_name, 'policy_version', r.policy_version,
                                   'deadline', v_deadline),
                v_now);
        v_count := v_count + 1;
    END LOOP;

    RETURN v_count;
END
$fn$;
"""

PREVIOUS_SUBMIT = r"""
CREATE OR REPLACE FUNCTION sas_submit(
    p_workflow text, p_input jsonb, p_submitter integer, p_key text, p_hash text, p_source text,
    p_queue_key text, p_task_func text, p_task_floor integer, p_notify boolean,
    p_callback_url text, p_trace_parent text
) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := statement_timestamp();
    v_wf record;
    v_job_id uuid := gen_random_uuid();
BEGIN
    SELECT id, name, version, deadline_seconds INTO v_wf FROM scheduler_workflow
    WHERE name = p_workflow ORDER BY version DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A job is created running: its first steps are dispatched in this same transaction.
    INSERT INTO scheduler_job (id, workflow_id, status, input, result, submitter_id, idempotency_key,
        request_hash, compensation_reason, paused_at, deadline, callback_url, trace_parent, created_at,
        updated_at, finished_at)
    VALUES (v_job_id, v_wf.id, 'running', p_input, NULL, p_submitter, p_key, p_hash, '', NULL,
        CASE WHEN v_wf.deadline_seconds IS NOT NULL AND v_wf.deadline_seconds > 0
             THEN v_now + make_interval(secs => v_wf.deadline_seconds) END,
        p_callback_url, p_trace_parent, v_now, v_now, NULL);
    INSERT INTO scheduler_step (job_id, definition_id, name, kind, compensates_id, status, operation_id,
        attempt, calls, last_outcome, pool_id, endpoint_id, deadline, not_before, first_dispatched_at,
        output, error, created_at, updated_at, finished_at)
    SELECT v_job_id, d.id, d.name, 'action', NULL, 'pending', gen_random_uuid()::text, 0, 0, '',
        d.pool_id, NULL, NULL, NULL, NULL, NULL, '', v_now, v_now, NULL
    FROM scheduler_stepdefinition d WHERE d.workflow_id = v_wf.id ORDER BY d.position;
    INSERT INTO scheduler_event (job_id, step_id, kind, from_status, to_status, attempt, actor_id,
                                 source, reason, data, created_at)
    VALUES (v_job_id, NULL, 'job_submitted', '', 'running', NULL, p_submitter, p_source, '',
            jsonb_build_object('workflow', v_wf.name, 'version', v_wf.version), v_now);
    PERFORM sas_dispatch_ready(v_job_id, v_now, p_source, p_queue_key, p_task_func, p_task_floor, p_notify);
    RETURN v_job_id;
END
$fn$;
"""

INPUT_INDEX = "CREATE INDEX IF NOT EXISTS job_input_gin_idx ON scheduler_job USING gin (input jsonb_path_ops)"
DROP_INPUT_INDEX = "DROP INDEX IF EXISTS job_input_gin_idx"

VIEWERS = {"viewers": ["view_all_jobs"], "operators": ["view_all_jobs"], "administrators": ["view_all_jobs"]}


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(SUBMIT, params=None)
        schema_editor.execute(OLD_SUBMIT_WRAPPER, params=None)
        schema_editor.execute(DISPATCH, params=None)
        schema_editor.execute(INPUT_INDEX, params=None)
    # Permissions are normally created after all migrations ran; this one needs its own now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in VIEWERS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="scheduler", codename__in=codenames)
        )


def restore(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_INPUT_INDEX, params=None)
        schema_editor.execute(PREVIOUS_DISPATCH, params=None)
        schema_editor.execute(DROP_NEW_SUBMIT, params=None)
        schema_editor.execute(PREVIOUS_SUBMIT, params=None)
    apps.get_model("auth", "Group").objects.filter(name="viewers").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0011_capacity_reruns_schedules"),
        ("agents", "0003_capacity_reruns_schedules"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create, restore)]
