-- Mirrors: scheduler.outbox.
-- Who receives the messages sent to a URL (scheduler_delivery.receiver, as receiver_of names it):
-- its host, in lower case and without a final dot, and its port, the scheme's default port
-- counting as written ('hooks.example.com:443', '[::1]:8080'); empty for what is not such a URL.
CREATE OR REPLACE FUNCTION sas_url_receiver(p_url text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    v_parts text[];
    v_host text;
    v_port text;
BEGIN
    -- scheme, host (a bracketed IPv6 address or a name), port; what follows the last '@' of the
    -- authority is the host, as Python's urlsplit reads it.
    v_parts := regexp_match(btrim(p_url),
        '^([A-Za-z][A-Za-z0-9+.-]*)://(?:[^/?#]*@)?(\[[^]/?#]*\]|[^:/?#]*)(?::([0-9]*))?(?:[/?#]|$)');
    IF v_parts IS NULL THEN
        RETURN '';
    END IF;
    v_host := rtrim(lower(v_parts[2]), '.');
    v_port := COALESCE(NULLIF(v_parts[3], ''),
                       CASE lower(v_parts[1]) WHEN 'http' THEN '80' WHEN 'https' THEN '443' END);
    IF v_host IN ('', '[]') OR v_port IS NULL OR length(v_port) > 5 OR v_port::int > 65535 THEN
        RETURN '';
    END IF;
    RETURN v_host || ':' || v_port::int::text;
END
$fn$;
