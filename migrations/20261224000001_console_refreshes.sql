-- Renewals of the web console's OAuth sessions. A session renews its access token with a
-- refresh token, which the authorization server may rotate: the old one is then spent,
-- and a second use of it is taken as theft (the whole grant is revoked). Requests of one
-- session that renew at once take turns (a transaction-scoped advisory lock on the
-- session), and the later ones take the first one's result from here instead of
-- spending the refresh token again. Rows are kept only while a request still carrying
-- the spent token may arrive; maintenance forgets them after that.
CREATE TABLE console_refreshes (
    -- The session's nonce.
    session    text        NOT NULL,
    -- SHA-256 of the refresh token that was spent.
    spent      bytea       NOT NULL,
    -- The renewed session, encrypted under the state keys as its cookie is.
    successor  text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (session, spent)
);

CREATE INDEX console_refreshes_expiry ON console_refreshes (expires_at);
