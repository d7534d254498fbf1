-- Ended sessions of 2025-era clients. A session id is a signed token that any replica
-- verifies on its own, so ending one (HTTP DELETE) must be remembered where every replica
-- looks: one row per deleted session, until the token would have expired anyway, when
-- maintenance forgets it.
--
-- Bounded per owner: once an owner has too many rows, they are replaced by one row with
-- session = '*' that ends every session of that owner issued before revoked_before.
CREATE TABLE session_revocations (
    tenant         text        NOT NULL,
    principal      text        NOT NULL,
    -- The session token's nonce, or '*' for all of the owner's sessions issued before
    -- revoked_before.
    session        text        NOT NULL,
    expires_at     timestamptz NOT NULL,
    revoked_before timestamptz,
    PRIMARY KEY (tenant, principal, session),
    CONSTRAINT session_revocations_wildcard_has_cutoff
        CHECK ((session = '*') = (revoked_before IS NOT NULL))
);

CREATE INDEX session_revocations_expiry ON session_revocations (expires_at);
