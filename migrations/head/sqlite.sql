-- The sqlite schema at revision 0016, as the migrations leave it: what a new warehouse
-- is created from (warehouse.db.head). Written by `python -m warehouse.db.head`; do not edit.
;
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)
;
CREATE TABLE sources (
	id INTEGER NOT NULL, 
	kind TEXT NOT NULL, 
	uri TEXT NOT NULL, 
	name TEXT NOT NULL, 
	revision TEXT, 
	card JSON, 
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, 
	CONSTRAINT pk_sources PRIMARY KEY (id), 
	CONSTRAINT uq_sources_kind_uri UNIQUE (kind, uri)
)
;
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	run_key TEXT NOT NULL, 
	name TEXT, 
	job_id TEXT, 
	started_at DATETIME, 
	finished_at DATETIME, 
	detail JSON, 
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, 
	CONSTRAINT pk_runs PRIMARY KEY (id), 
	CONSTRAINT uq_runs_run_key UNIQUE (run_key)
)
;
CREATE TABLE tasks (
	id INTEGER NOT NULL, 
	name TEXT NOT NULL, 
	checksum TEXT, 
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, 
	CONSTRAINT pk_tasks PRIMARY KEY (id), 
	CONSTRAINT uq_tasks_name UNIQUE (name)
)
;
CREATE TABLE messages (
	id INTEGER NOT NULL, 
	content_hash BLOB NOT NULL, 
	content TEXT NOT NULL, 
	content_raw BLOB, 
	n_chars INTEGER NOT NULL, 
	CONSTRAINT pk_messages PRIMARY KEY (id), 
	CONSTRAINT uq_messages_content_hash UNIQUE (content_hash)
)
;
CREATE TABLE trials (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	task_id INTEGER, 
	trial_name TEXT NOT NULL, 
	status TEXT NOT NULL, 
	agent TEXT, 
	agent_version TEXT, 
	model TEXT, 
	model_provider TEXT, 
	result TEXT, 
	reward FLOAT, 
	rewards JSON, 
	exception_type TEXT, 
	exception_message TEXT, 
	started_at DATETIME, 
	finished_at DATETIME, 
	date_raw TEXT, 
	n_input_tokens INTEGER, 
	n_cache_tokens INTEGER, 
	n_output_tokens INTEGER, 
	cost_usd FLOAT, 
	verifier_output TEXT, 
	instruction_id INTEGER, 
	task_checksum TEXT, 
	source_run_id TEXT, 
	detail JSON, 
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, model_name TEXT GENERATED ALWAYS AS (substr(model, length(rtrim(model, replace(model, '/', ''))) + 1)), 
	CONSTRAINT pk_trials PRIMARY KEY (id), 
	CONSTRAINT fk_trials_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id), 
	CONSTRAINT fk_trials_task_id_tasks FOREIGN KEY(task_id) REFERENCES tasks (id), 
	CONSTRAINT fk_trials_instruction_id_messages FOREIGN KEY(instruction_id) REFERENCES messages (id), 
	CONSTRAINT uq_trials_run_id_trial_name UNIQUE (run_id, trial_name)
)
;
CREATE TABLE episodes (
	id INTEGER NOT NULL, 
	trial_id INTEGER NOT NULL, 
	trace_source TEXT NOT NULL, 
	episode_index INTEGER NOT NULL, 
	n_turns INTEGER NOT NULL, 
	n_chars INTEGER NOT NULL, 
	conversation_hash TEXT NOT NULL, 
	extra JSON, 
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, conversation_id INTEGER CONSTRAINT fk_episodes_conversation_id_conversations REFERENCES conversations (id), 
	CONSTRAINT pk_episodes PRIMARY KEY (id), 
	CONSTRAINT fk_episodes_trial_id_trials FOREIGN KEY(trial_id) REFERENCES trials (id), 
	CONSTRAINT uq_episodes_trial_id_trace_source_episode_index UNIQUE (trial_id, trace_source, episode_index)
)
;
CREATE TABLE episode_loads (
	load_id INTEGER NOT NULL, 
	row_number INTEGER NOT NULL, 
	episode_id INTEGER NOT NULL, extra JSON, 
	CONSTRAINT pk_episode_loads PRIMARY KEY (load_id, row_number), 
	CONSTRAINT fk_episode_loads_load_id_loads FOREIGN KEY(load_id) REFERENCES loads (id), 
	CONSTRAINT fk_episode_loads_episode_id_episodes FOREIGN KEY(episode_id) REFERENCES episodes (id)
)
;
CREATE TABLE trial_loads (
	trial_id INTEGER NOT NULL, 
	load_id INTEGER NOT NULL, 
	CONSTRAINT pk_trial_loads PRIMARY KEY (trial_id, load_id), 
	CONSTRAINT fk_trial_loads_trial_id_trials FOREIGN KEY(trial_id) REFERENCES trials (id), 
	CONSTRAINT fk_trial_loads_load_id_loads FOREIGN KEY(load_id) REFERENCES loads (id)
)
;
CREATE TABLE conflicts (
	id INTEGER NOT NULL, 
	load_id INTEGER NOT NULL, 
	entity TEXT NOT NULL, 
	entity_id INTEGER NOT NULL, 
	field TEXT, 
	kept JSON, 
	incoming JSON, 
	row_number INTEGER, 
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, 
	CONSTRAINT pk_conflicts PRIMARY KEY (id), 
	CONSTRAINT fk_conflicts_load_id_loads FOREIGN KEY(load_id) REFERENCES loads (id)
)
;
CREATE TABLE run_task_breakdown (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	task_id INTEGER, 
	agent TEXT, 
	model TEXT, 
	exception_type TEXT, 
	n_trials INTEGER NOT NULL, 
	n_complete INTEGER NOT NULL, 
	n_incomplete INTEGER NOT NULL, 
	n_successes INTEGER NOT NULL, 
	n_rewards INTEGER NOT NULL, 
	reward_sum FLOAT, 
	first_started DATETIME, 
	last_started DATETIME, 
	n_with_trajectory INTEGER NOT NULL, 
	n_with_input_tokens INTEGER NOT NULL, 
	n_with_output_tokens INTEGER NOT NULL, model_name TEXT GENERATED ALWAYS AS (substr(model, length(rtrim(model, replace(model, '/', ''))) + 1)), 
	CONSTRAINT pk_run_task_breakdown PRIMARY KEY (id)
)
;
CREATE TABLE run_task_outcomes (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	task_id INTEGER, 
	n_trials INTEGER NOT NULL, 
	n_complete INTEGER NOT NULL, 
	n_incomplete INTEGER NOT NULL, 
	n_successes INTEGER NOT NULL, 
	n_rewards INTEGER NOT NULL, 
	reward_sum FLOAT, 
	n_errors INTEGER NOT NULL, 
	first_started DATETIME, 
	last_started DATETIME, 
	n_with_trajectory INTEGER NOT NULL, 
	n_with_input_tokens INTEGER NOT NULL, 
	n_with_output_tokens INTEGER NOT NULL, 
	CONSTRAINT pk_run_task_outcomes PRIMARY KEY (id), 
	CONSTRAINT uq_run_task_outcomes_run_id_task_id UNIQUE (run_id, task_id)
)
;
CREATE TABLE trial_lengths (
	trial_id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	turns INTEGER, 
	chars INTEGER, 
	input_tokens INTEGER, 
	output_tokens INTEGER, 
	CONSTRAINT pk_trial_lengths PRIMARY KEY (trial_id)
)
;
CREATE TABLE run_sources (
	run_id INTEGER NOT NULL, 
	source_id INTEGER NOT NULL, 
	CONSTRAINT pk_run_sources PRIMARY KEY (run_id, source_id)
)
;
CREATE TABLE "loads" (
	id INTEGER NOT NULL, 
	source_id INTEGER NOT NULL, 
	unit TEXT NOT NULL, 
	content_hash TEXT NOT NULL, 
	status TEXT NOT NULL, 
	started_at DATETIME NOT NULL, 
	finished_at DATETIME NOT NULL, 
	tool_version TEXT NOT NULL, 
	n_rows INTEGER NOT NULL, 
	n_trials INTEGER NOT NULL, 
	n_episodes_new INTEGER NOT NULL, 
	n_episodes_duplicate INTEGER NOT NULL, 
	n_conflicts INTEGER NOT NULL, 
	n_rejected INTEGER NOT NULL, 
	n_turns INTEGER NOT NULL, 
	n_bytes INTEGER NOT NULL, 
	arrow_schema TEXT, 
	detail JSON, 
	CONSTRAINT pk_loads PRIMARY KEY (id), 
	CONSTRAINT fk_loads_source_id_sources FOREIGN KEY(source_id) REFERENCES sources (id), 
	CONSTRAINT uq_loads_source_id_unit_content_hash UNIQUE (source_id, unit, content_hash)
)
;
CREATE TABLE run_labels (
	run_id INTEGER NOT NULL, 
	"key" TEXT NOT NULL, 
	value TEXT NOT NULL, 
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL, 
	CONSTRAINT pk_run_labels PRIMARY KEY (run_id, "key"), 
	CONSTRAINT fk_run_labels_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id)
)
;
CREATE TABLE conversations (
	id INTEGER NOT NULL, 
	trial_id INTEGER NOT NULL, 
	CONSTRAINT pk_conversations PRIMARY KEY (id), 
	CONSTRAINT fk_conversations_trial_id_trials FOREIGN KEY(trial_id) REFERENCES trials (id)
)
;
CREATE TABLE conversation_turns (
	conversation_id INTEGER NOT NULL, 
	idx INTEGER NOT NULL, 
	role TEXT NOT NULL, 
	message_id INTEGER, 
	extra JSON, 
	CONSTRAINT pk_conversation_turns PRIMARY KEY (conversation_id, idx), 
	CONSTRAINT fk_conversation_turns_conversation_id_conversations FOREIGN KEY(conversation_id) REFERENCES conversations (id), 
	CONSTRAINT fk_conversation_turns_message_id_messages FOREIGN KEY(message_id) REFERENCES messages (id)
)
;
CREATE INDEX ix_trials_task_id ON trials (task_id)
;
CREATE INDEX ix_trials_instruction_id ON trials (instruction_id)
;
CREATE INDEX ix_episode_loads_episode_id ON episode_loads (episode_id)
;
CREATE INDEX ix_trial_loads_load_id ON trial_loads (load_id)
;
CREATE INDEX ix_conflicts_load_id ON conflicts (load_id)
;
CREATE INDEX ix_trials_outcomes ON trials (run_id, task_id, reward, exception_type, status, agent, model, started_at)
;
CREATE INDEX ix_run_task_breakdown_run_id_task_id ON run_task_breakdown (run_id, task_id)
;
CREATE INDEX ix_run_task_breakdown_groups ON run_task_breakdown (run_id, agent, model, exception_type, n_trials, n_successes, n_rewards, reward_sum)
;
CREATE INDEX ix_run_task_breakdown_failures ON run_task_breakdown (exception_type, run_id, task_id, n_trials)
;
CREATE INDEX ix_run_task_outcomes_by_task ON run_task_outcomes (task_id, run_id, n_trials, n_successes)
;
CREATE INDEX ix_trial_lengths_run_id_turns ON trial_lengths (run_id, turns) WHERE turns IS NOT NULL
;
CREATE INDEX ix_trial_lengths_run_id_chars ON trial_lengths (run_id, chars) WHERE chars IS NOT NULL
;
CREATE INDEX ix_trial_lengths_run_id_input_tokens ON trial_lengths (run_id, input_tokens) WHERE input_tokens IS NOT NULL
;
CREATE INDEX ix_trial_lengths_run_id_output_tokens ON trial_lengths (run_id, output_tokens) WHERE output_tokens IS NOT NULL
;
CREATE INDEX ix_run_labels_key_value ON run_labels ("key", value)
;
CREATE INDEX ix_conversations_trial_id ON conversations (trial_id)
;
CREATE INDEX ix_conversation_turns_message_id ON conversation_turns (message_id)
;
CREATE INDEX ix_episodes_conversation_id_n_turns ON episodes (conversation_id, n_turns)
;
CREATE VIEW trial_summary AS
SELECT tr.id AS trial_id, r.run_key, tk.name AS task, tr.trial_name, tr.agent, tr.model,
       tr.result, tr.reward, tr.exception_type, tr.status, tr.started_at,
       (SELECT count(*) FROM episodes e WHERE e.trial_id = tr.id) AS n_episodes
FROM trials tr
JOIN runs r ON r.id = tr.run_id
LEFT JOIN tasks tk ON tk.id = tr.task_id
;
CREATE VIEW turns AS
SELECT e.id AS episode_id, ct.idx, ct.role, ct.message_id, ct.extra
FROM episodes e JOIN conversation_turns ct ON ct.conversation_id = e.conversation_id AND ct.idx < e.n_turns
;
CREATE VIEW turn_text AS
SELECT t.episode_id, t.idx, t.role, m.content
FROM turns t LEFT JOIN messages m ON m.id = t.message_id
;
INSERT INTO alembic_version (version_num) VALUES ('0016')
;
