-- Mirrors: supervisor.lease.
-- SQLite's twin of postgresql/sas_lease_term.sql.
CREATE TRIGGER supervisor_lease_term AFTER UPDATE ON supervisor_supervisorlease
FOR EACH ROW WHEN OLD.token <> NEW.token AND OLD.holder <> ''
BEGIN
    INSERT INTO supervisor_leaseterm (lease, token, holder, acquired_at, expired_at, ended_at, ended_by)
    VALUES (
        OLD.name, OLD.token, OLD.holder, OLD.acquired_at,
        -- A holder taken over before its lease expired (supervisor.debt) could act until then.
        CASE WHEN OLD.expires_at > NEW.acquired_at THEN NEW.acquired_at ELSE OLD.expires_at END,
        NEW.acquired_at, NEW.holder
    );
END;
