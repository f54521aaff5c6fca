-- Mirrors: supervisor.lease.
-- The previous holder's term, written when the token changes hands (a first acquisition, from the
-- empty holder, finishes no term).
CREATE FUNCTION sas_lease_term() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO supervisor_leaseterm (lease, token, holder, acquired_at, expired_at, ended_at, ended_by)
    VALUES (
        OLD.name, OLD.token, OLD.holder, OLD.acquired_at,
        -- A holder taken over before its lease expired (supervisor.debt) could act until then.
        CASE WHEN OLD.expires_at > NEW.acquired_at THEN NEW.acquired_at ELSE OLD.expires_at END,
        NEW.acquired_at, NEW.holder
    );
    RETURN NEW;
END
$$;
CREATE TRIGGER supervisor_lease_term AFTER UPDATE ON supervisor_supervisorlease
FOR EACH ROW WHEN (OLD.token IS DISTINCT FROM NEW.token AND OLD.holder <> '')
EXECUTE FUNCTION sas_lease_term();
