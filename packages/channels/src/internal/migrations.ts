/**
 * The channel store's schema, one entry per version. `PRAGMA user_version` holds the number of
 * migrations applied; each runs once, in order, inside one transaction with the version bump.
 * Never edit a shipped entry: add a new one.
 * @internal
 */
export const migrations: ReadonlyArray<string> = [
  `
  CREATE TABLE inbound (
    channel TEXT NOT NULL,
    platform_message_id TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (channel, platform_message_id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX inbound_received ON inbound(received_at);

  CREATE TABLE pairing_codes (
    digest TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    principal TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    binding_ttl_ms INTEGER,
    used_at INTEGER
  ) STRICT;

  CREATE TABLE bindings (
    channel TEXT NOT NULL,
    account TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER,
    PRIMARY KEY (channel, account, sender_id)
  ) STRICT;
  CREATE INDEX bindings_principal ON bindings(principal);

  CREATE TABLE attempts (
    channel TEXT NOT NULL,
    account TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    failures INTEGER NOT NULL,
    window_start INTEGER NOT NULL,
    locked_until INTEGER,
    last_hint_at INTEGER,
    PRIMARY KEY (channel, account, sender_id)
  ) STRICT;

  CREATE TABLE outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    channel TEXT NOT NULL,
    account TEXT NOT NULL,
    conversation TEXT NOT NULL,
    thread TEXT,
    reply_to TEXT,
    session_id TEXT,
    run_id TEXT,
    part TEXT NOT NULL,
    text TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'unknown', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    platform_message_id TEXT,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX outbox_due ON outbox(channel, state, next_attempt_at, seq);
  CREATE INDEX outbox_conversation ON outbox(channel, conversation, state, seq);
  CREATE INDEX outbox_session ON outbox(session_id) WHERE session_id IS NOT NULL;

  CREATE TABLE approval_codes (
    code TEXT PRIMARY KEY,
    approval_id TEXT NOT NULL UNIQUE,
    channel TEXT NOT NULL,
    conversation TEXT NOT NULL,
    principal TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE watches (
    run_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    channel TEXT NOT NULL,
    account TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    conversation TEXT NOT NULL,
    thread TEXT,
    reply_to TEXT,
    created_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX watches_channel ON watches(channel);

  CREATE TABLE rejections (
    channel TEXT NOT NULL,
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    last_at INTEGER NOT NULL,
    PRIMARY KEY (channel, reason)
  ) STRICT;
  `,
  // 2: operators revoke pairing codes (CLI/HTTP).
  `
  ALTER TABLE pairing_codes ADD COLUMN revoked_at INTEGER;
  `
]

/** `PRAGMA application_id` of a channel store ("PlCh"): a file of another kind is refused. @internal */
export const APPLICATION_ID = 0x506c4368
