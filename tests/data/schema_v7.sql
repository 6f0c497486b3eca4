-- index idx_chunks_created_at
CREATE INDEX idx_chunks_created_at ON chunks(created_at);
-- index idx_chunks_embedding
CREATE INDEX idx_chunks_embedding ON chunks(embedding_model, embedding_dim, embed_seq);
-- index idx_chunks_first_msg
CREATE INDEX idx_chunks_first_msg ON chunks(first_msg_id);
-- index idx_chunks_last_msg
CREATE INDEX idx_chunks_last_msg ON chunks(last_msg_id);
-- index idx_chunks_session
CREATE INDEX idx_chunks_session ON chunks(session_id);
-- index idx_chunks_unembedded
CREATE INDEX idx_chunks_unembedded ON chunks(id) WHERE embedding IS NULL;
-- index idx_fact_reviews_new
CREATE INDEX idx_fact_reviews_new ON fact_reviews(new_fact_id);
-- index idx_facts_invalidated_by
CREATE INDEX idx_facts_invalidated_by ON facts(invalidated_by);
-- index idx_facts_key_valid_from
CREATE INDEX idx_facts_key_valid_from ON facts(key, valid_from);
-- index idx_facts_live_key
CREATE UNIQUE INDEX idx_facts_live_key ON facts(key) WHERE invalidated_at IS NULL;
-- index idx_facts_origin_session
CREATE INDEX idx_facts_origin_session ON facts(origin_session_id);
-- index idx_graph_edges_chunk
CREATE INDEX idx_graph_edges_chunk ON graph_edges(source_chunk_id);
-- index idx_graph_edges_target
CREATE INDEX idx_graph_edges_target ON graph_edges(target_node);
-- index idx_graph_edges_trim
CREATE INDEX idx_graph_edges_trim ON graph_edges(importance, seen_count, last_seen);
-- index idx_graph_edges_triple
CREATE UNIQUE INDEX idx_graph_edges_triple ON graph_edges(source_node, target_node, relationship);
-- index idx_graph_mentions_chunk
CREATE INDEX idx_graph_mentions_chunk ON graph_mentions(chunk_id);
-- index idx_graph_nodes_cluster
CREATE INDEX idx_graph_nodes_cluster ON graph_nodes(cluster_id);
-- index idx_graph_nodes_name
CREATE INDEX idx_graph_nodes_name ON graph_nodes(canonical_name);
-- index idx_graph_nodes_trim
CREATE INDEX idx_graph_nodes_trim ON graph_nodes(importance, mention_count, updated_at);
-- index idx_graph_nodes_type_name
CREATE UNIQUE INDEX idx_graph_nodes_type_name ON graph_nodes(type, canonical_name);
-- index idx_jobs_claim
CREATE INDEX idx_jobs_claim ON jobs(state, priority, id);
-- index idx_jobs_session
CREATE INDEX idx_jobs_session ON jobs(session_id);
-- index idx_lessons_archived_used
CREATE INDEX idx_lessons_archived_used ON lessons(archived, last_used_at);
-- index idx_messages_session_turn
CREATE INDEX idx_messages_session_turn ON messages(session_id, turn);
-- index idx_sessions_ended_at
CREATE INDEX idx_sessions_ended_at ON sessions(ended_at);
-- index idx_sessions_started_at
CREATE INDEX idx_sessions_started_at ON sessions(started_at);
-- table ann_index
CREATE TABLE ann_index ( label TEXT NOT NULL, dim INTEGER NOT NULL, seq INTEGER NOT NULL, gen INTEGER NOT NULL, data BLOB NOT NULL, built_at TEXT NOT NULL, PRIMARY KEY (label, dim) );
-- table chunks
CREATE TABLE chunks ( id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, first_msg_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE, last_msg_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE, text TEXT NOT NULL, created_at TEXT NOT NULL, embedding BLOB, embedding_model TEXT, embedding_dim INTEGER, embed_seq INTEGER, importance REAL NOT NULL DEFAULT 0.5 );
-- table chunks_fts
CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');
-- table events
CREATE TABLE events ( id INTEGER PRIMARY KEY, ts TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT );
-- table fact_reviews
CREATE TABLE fact_reviews ( id INTEGER PRIMARY KEY, old_fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE, new_fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE, verdict TEXT NOT NULL CHECK (verdict IN ('merged', 'kept', 'rejected')), result_fact_id INTEGER REFERENCES facts(id) ON DELETE SET NULL, reviewed_at TEXT NOT NULL, UNIQUE (old_fact_id, new_fact_id) );
-- table fact_vectors
CREATE TABLE fact_vectors ( fact_id INTEGER PRIMARY KEY REFERENCES facts(id) ON DELETE CASCADE, embedding_model TEXT NOT NULL, embedding_dim INTEGER NOT NULL, embedding BLOB NOT NULL );
-- table facts
CREATE TABLE facts ( id INTEGER PRIMARY KEY, key TEXT NOT NULL, value TEXT NOT NULL, category TEXT NOT NULL CHECK (category IN ('profile', 'note')), source TEXT NOT NULL CHECK (source IN ('explicit', 'auto', 'rule', 'import', 'merge')), importance REAL NOT NULL, created_at TEXT NOT NULL, valid_from TEXT NOT NULL, invalidated_at TEXT, invalidated_by INTEGER REFERENCES facts(id) ON DELETE SET NULL, archived INTEGER NOT NULL DEFAULT 0, last_accessed_at TEXT, access_count INTEGER NOT NULL DEFAULT 0, origin_session_id INTEGER REFERENCES sessions(id) ON DELETE SET NULL );
-- table facts_fts
CREATE VIRTUAL TABLE facts_fts USING fts5(key, value, content='facts', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');
-- table graph_edges
CREATE TABLE graph_edges ( id INTEGER PRIMARY KEY, source_node INTEGER NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE, target_node INTEGER NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE, relationship TEXT NOT NULL, confidence REAL NOT NULL DEFAULT 0.5, importance REAL NOT NULL DEFAULT 0.5, weight REAL NOT NULL DEFAULT 1.0, created_at TEXT NOT NULL, last_seen TEXT NOT NULL, seen_count INTEGER NOT NULL DEFAULT 1, source_chunk_id INTEGER REFERENCES chunks(id) ON DELETE SET NULL, CHECK (source_node <> target_node) );
-- table graph_mentions
CREATE TABLE graph_mentions ( node_id INTEGER NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE, chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE, created_at TEXT NOT NULL, PRIMARY KEY (node_id, chunk_id) ) WITHOUT ROWID;
-- table graph_merge_reviews
CREATE TABLE graph_merge_reviews ( id INTEGER PRIMARY KEY, type_a TEXT NOT NULL, name_a TEXT NOT NULL, type_b TEXT NOT NULL, name_b TEXT NOT NULL, verdict TEXT NOT NULL CHECK (verdict IN ('same', 'different')), reviewed_at TEXT NOT NULL, UNIQUE (type_a, name_a, type_b, name_b) );
-- table graph_nodes
CREATE TABLE graph_nodes ( id INTEGER PRIMARY KEY, type TEXT NOT NULL DEFAULT 'entity' CHECK (type IN ('person', 'place', 'org', 'thing', 'entity', 'self')), canonical_name TEXT NOT NULL, aliases TEXT NOT NULL DEFAULT '[]', created_at TEXT NOT NULL, updated_at TEXT NOT NULL, importance REAL NOT NULL DEFAULT 0.5, confidence REAL NOT NULL DEFAULT 0.5, mention_count INTEGER NOT NULL DEFAULT 1, cluster_id INTEGER, cluster_label TEXT );
-- table jobs
CREATE TABLE jobs ( id INTEGER PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('extract', 'embed', 'link', 'rolling_summary', 'session_summary', 'consolidate')), state TEXT NOT NULL CHECK (state IN ('queued', 'held', 'running', 'failed')), phase TEXT NOT NULL DEFAULT 'turn', session_id INTEGER REFERENCES sessions(id) ON DELETE CASCADE, payload TEXT NOT NULL DEFAULT '{}', priority INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, not_before TEXT, last_error TEXT, owner_pid INTEGER, owner_host TEXT, lease_until TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL );
-- table lessons
CREATE TABLE lessons ( id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE, tag TEXT, created_at TEXT NOT NULL, last_used_at TEXT NOT NULL, use_count INTEGER NOT NULL DEFAULT 1, archived INTEGER NOT NULL DEFAULT 0 );
-- table messages
CREATE TABLE messages ( id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, turn INTEGER NOT NULL, role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')), content TEXT NOT NULL, created_at TEXT NOT NULL, token_estimate INTEGER NOT NULL DEFAULT 0 );
-- table meta
CREATE TABLE meta ( key TEXT PRIMARY KEY, value TEXT NOT NULL );
-- table quarantine
CREATE TABLE quarantine ( id INTEGER PRIMARY KEY, ts TEXT NOT NULL, key TEXT, value TEXT, reason TEXT NOT NULL, source TEXT );
-- table schema_migrations
CREATE TABLE schema_migrations ( version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL );
-- table sessions
CREATE TABLE sessions ( id INTEGER PRIMARY KEY, started_at TEXT NOT NULL, ended_at TEXT, title TEXT, summary TEXT, rolling_summary TEXT, message_count INTEGER NOT NULL DEFAULT 0, host_tag TEXT, owner_pid INTEGER, owner_host TEXT, heartbeat_at TEXT, backdated INTEGER NOT NULL DEFAULT 0 );
-- trigger chunks_fts_ad
CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END;
-- trigger chunks_fts_ai
CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END;
-- trigger chunks_fts_au
CREATE TRIGGER chunks_fts_au AFTER UPDATE OF text ON chunks BEGIN INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END;
-- trigger fact_vectors_stamp_ad
CREATE TRIGGER fact_vectors_stamp_ad AFTER DELETE ON fact_vectors BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('fact_vectors.stamp', hex(randomblob(8))); END;
-- trigger fact_vectors_stamp_ai
CREATE TRIGGER fact_vectors_stamp_ai AFTER INSERT ON fact_vectors BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('fact_vectors.stamp', hex(randomblob(8))); END;
-- trigger fact_vectors_stamp_au
CREATE TRIGGER fact_vectors_stamp_au AFTER UPDATE ON fact_vectors BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('fact_vectors.stamp', hex(randomblob(8))); END;
-- trigger facts_fts_ad
CREATE TRIGGER facts_fts_ad AFTER DELETE ON facts BEGIN INSERT INTO facts_fts(facts_fts, rowid, key, value) VALUES ('delete', old.id, old.key, old.value); END;
-- trigger facts_fts_ai
CREATE TRIGGER facts_fts_ai AFTER INSERT ON facts BEGIN INSERT INTO facts_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END;
-- trigger facts_fts_au
CREATE TRIGGER facts_fts_au AFTER UPDATE OF key, value ON facts BEGIN INSERT INTO facts_fts(facts_fts, rowid, key, value) VALUES ('delete', old.id, old.key, old.value); INSERT INTO facts_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END;
-- trigger facts_stamp_ad
CREATE TRIGGER facts_stamp_ad AFTER DELETE ON facts BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('facts.stamp', hex(randomblob(8))); END;
-- trigger facts_stamp_ai
CREATE TRIGGER facts_stamp_ai AFTER INSERT ON facts BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('facts.stamp', hex(randomblob(8))); END;
-- trigger facts_stamp_au
CREATE TRIGGER facts_stamp_au AFTER UPDATE OF key, value, category, importance, valid_from, invalidated_at, archived ON facts BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('facts.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_edges_ad
CREATE TRIGGER graph_stamp_edges_ad AFTER DELETE ON graph_edges BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_edges_ai
CREATE TRIGGER graph_stamp_edges_ai AFTER INSERT ON graph_edges BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_edges_au
CREATE TRIGGER graph_stamp_edges_au AFTER UPDATE OF source_node, target_node, weight ON graph_edges BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_mentions_ad
CREATE TRIGGER graph_stamp_mentions_ad AFTER DELETE ON graph_mentions BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_mentions_ai
CREATE TRIGGER graph_stamp_mentions_ai AFTER INSERT ON graph_mentions BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_mentions_au
CREATE TRIGGER graph_stamp_mentions_au AFTER UPDATE OF node_id, chunk_id ON graph_mentions BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_nodes_ad
CREATE TRIGGER graph_stamp_nodes_ad AFTER DELETE ON graph_nodes BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_nodes_ai
CREATE TRIGGER graph_stamp_nodes_ai AFTER INSERT ON graph_nodes BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
-- trigger graph_stamp_nodes_au
CREATE TRIGGER graph_stamp_nodes_au AFTER UPDATE OF id, type, confidence ON graph_nodes BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('graph.stamp', hex(randomblob(8))); END;
