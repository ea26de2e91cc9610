-- The postgresql schema at revision 0016, as the migrations leave it: what a new warehouse
-- is created from (warehouse.db.head). Written by `python -m warehouse.db.head`; do not edit.
;
CREATE TABLE public.alembic_version (
    version_num character varying(32) NOT NULL
)
;
CREATE TABLE public.conflicts (
    id bigint NOT NULL,
    load_id bigint NOT NULL,
    entity text NOT NULL,
    entity_id bigint NOT NULL,
    field text,
    kept jsonb,
    incoming jsonb,
    row_number integer,
    created_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL
)
;
CREATE SEQUENCE public.conflicts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.conflicts_id_seq OWNED BY public.conflicts.id
;
CREATE TABLE public.conversation_turns (
    conversation_id bigint NOT NULL,
    idx integer NOT NULL,
    role text NOT NULL,
    message_id bigint,
    extra jsonb
)
;
CREATE TABLE public.conversations (
    id bigint NOT NULL,
    trial_id bigint NOT NULL
)
;
CREATE SEQUENCE public.conversations_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.conversations_id_seq OWNED BY public.conversations.id
;
CREATE TABLE public.episode_loads (
    load_id bigint NOT NULL,
    row_number integer NOT NULL,
    episode_id bigint NOT NULL,
    extra jsonb
)
;
CREATE TABLE public.episodes (
    id bigint NOT NULL,
    trial_id bigint NOT NULL,
    trace_source text NOT NULL,
    episode_index integer NOT NULL,
    n_turns integer NOT NULL,
    n_chars integer NOT NULL,
    conversation_hash text NOT NULL,
    extra jsonb,
    created_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    conversation_id bigint
)
;
CREATE SEQUENCE public.episodes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.episodes_id_seq OWNED BY public.episodes.id
;
CREATE TABLE public.loads (
    id bigint NOT NULL,
    source_id bigint NOT NULL,
    unit text NOT NULL,
    content_hash text NOT NULL,
    status text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    tool_version text NOT NULL,
    n_rows integer NOT NULL,
    n_trials integer NOT NULL,
    n_episodes_new integer NOT NULL,
    n_episodes_duplicate integer NOT NULL,
    n_conflicts integer NOT NULL,
    n_rejected integer NOT NULL,
    n_turns integer NOT NULL,
    n_bytes integer NOT NULL,
    arrow_schema text,
    detail jsonb
)
;
CREATE SEQUENCE public.loads_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.loads_id_seq OWNED BY public.loads.id
;
CREATE TABLE public.messages (
    id bigint NOT NULL,
    content_hash bytea NOT NULL,
    content text NOT NULL,
    content_raw bytea,
    n_chars integer NOT NULL
)
;
CREATE SEQUENCE public.messages_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.messages_id_seq OWNED BY public.messages.id
;
CREATE TABLE public.run_labels (
    run_id bigint NOT NULL,
    key text NOT NULL,
    value text NOT NULL,
    created_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL
)
;
CREATE TABLE public.run_sources (
    run_id bigint NOT NULL,
    source_id bigint NOT NULL
)
;
CREATE TABLE public.run_task_breakdown (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    task_id bigint,
    agent text,
    model text,
    exception_type text,
    n_trials integer NOT NULL,
    n_complete integer NOT NULL,
    n_incomplete integer NOT NULL,
    n_successes integer NOT NULL,
    n_rewards integer NOT NULL,
    reward_sum double precision,
    first_started timestamp with time zone,
    last_started timestamp with time zone,
    n_with_trajectory integer NOT NULL,
    n_with_input_tokens integer NOT NULL,
    n_with_output_tokens integer NOT NULL,
    model_name text GENERATED ALWAYS AS (substr(model, (length(rtrim(model, replace(model, '/'::text, ''::text))) + 1))) STORED
)
;
CREATE SEQUENCE public.run_task_breakdown_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.run_task_breakdown_id_seq OWNED BY public.run_task_breakdown.id
;
CREATE TABLE public.run_task_outcomes (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    task_id bigint,
    n_trials integer NOT NULL,
    n_complete integer NOT NULL,
    n_incomplete integer NOT NULL,
    n_successes integer NOT NULL,
    n_rewards integer NOT NULL,
    reward_sum double precision,
    n_errors integer NOT NULL,
    first_started timestamp with time zone,
    last_started timestamp with time zone,
    n_with_trajectory integer NOT NULL,
    n_with_input_tokens integer NOT NULL,
    n_with_output_tokens integer NOT NULL
)
;
CREATE SEQUENCE public.run_task_outcomes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.run_task_outcomes_id_seq OWNED BY public.run_task_outcomes.id
;
CREATE TABLE public.runs (
    id bigint NOT NULL,
    run_key text NOT NULL,
    name text,
    job_id text,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    detail jsonb,
    created_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL
)
;
CREATE SEQUENCE public.runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.runs_id_seq OWNED BY public.runs.id
;
CREATE TABLE public.sources (
    id bigint NOT NULL,
    kind text NOT NULL,
    uri text NOT NULL,
    name text NOT NULL,
    revision text,
    card jsonb,
    created_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL
)
;
CREATE SEQUENCE public.sources_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.sources_id_seq OWNED BY public.sources.id
;
CREATE TABLE public.tasks (
    id bigint NOT NULL,
    name text NOT NULL,
    checksum text,
    created_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL
)
;
CREATE SEQUENCE public.tasks_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.tasks_id_seq OWNED BY public.tasks.id
;
CREATE TABLE public.trial_lengths (
    trial_id bigint NOT NULL,
    run_id bigint NOT NULL,
    turns integer,
    chars integer,
    input_tokens bigint,
    output_tokens bigint
)
;
CREATE TABLE public.trial_loads (
    trial_id bigint NOT NULL,
    load_id bigint NOT NULL
)
;
CREATE TABLE public.trials (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    task_id bigint,
    trial_name text NOT NULL,
    status text NOT NULL,
    agent text,
    agent_version text,
    model text,
    model_provider text,
    result text,
    reward double precision,
    rewards jsonb,
    exception_type text,
    exception_message text,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    date_raw text,
    n_input_tokens bigint,
    n_cache_tokens bigint,
    n_output_tokens bigint,
    cost_usd double precision,
    verifier_output text,
    instruction_id bigint,
    task_checksum text,
    source_run_id text,
    detail jsonb,
    created_at timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    model_name text GENERATED ALWAYS AS (substr(model, (length(rtrim(model, replace(model, '/'::text, ''::text))) + 1))) STORED
)
;
CREATE VIEW public.trial_summary AS
 SELECT tr.id AS trial_id,
    r.run_key,
    tk.name AS task,
    tr.trial_name,
    tr.agent,
    tr.model,
    tr.result,
    tr.reward,
    tr.exception_type,
    tr.status,
    tr.started_at,
    ( SELECT count(*) AS count
           FROM public.episodes e
          WHERE (e.trial_id = tr.id)) AS n_episodes
   FROM ((public.trials tr
     JOIN public.runs r ON ((r.id = tr.run_id)))
     LEFT JOIN public.tasks tk ON ((tk.id = tr.task_id)))
;
CREATE SEQUENCE public.trials_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
;
ALTER SEQUENCE public.trials_id_seq OWNED BY public.trials.id
;
CREATE VIEW public.turns AS
 SELECT e.id AS episode_id,
    ct.idx,
    ct.role,
    ct.message_id,
    ct.extra
   FROM (public.episodes e
     JOIN public.conversation_turns ct ON (((ct.conversation_id = e.conversation_id) AND (ct.idx < e.n_turns))))
;
CREATE VIEW public.turn_text AS
 SELECT t.episode_id,
    t.idx,
    t.role,
    m.content
   FROM (public.turns t
     LEFT JOIN public.messages m ON ((m.id = t.message_id)))
;
ALTER TABLE ONLY public.conflicts ALTER COLUMN id SET DEFAULT nextval('public.conflicts_id_seq'::regclass)
;
ALTER TABLE ONLY public.conversations ALTER COLUMN id SET DEFAULT nextval('public.conversations_id_seq'::regclass)
;
ALTER TABLE ONLY public.episodes ALTER COLUMN id SET DEFAULT nextval('public.episodes_id_seq'::regclass)
;
ALTER TABLE ONLY public.loads ALTER COLUMN id SET DEFAULT nextval('public.loads_id_seq'::regclass)
;
ALTER TABLE ONLY public.messages ALTER COLUMN id SET DEFAULT nextval('public.messages_id_seq'::regclass)
;
ALTER TABLE ONLY public.run_task_breakdown ALTER COLUMN id SET DEFAULT nextval('public.run_task_breakdown_id_seq'::regclass)
;
ALTER TABLE ONLY public.run_task_outcomes ALTER COLUMN id SET DEFAULT nextval('public.run_task_outcomes_id_seq'::regclass)
;
ALTER TABLE ONLY public.runs ALTER COLUMN id SET DEFAULT nextval('public.runs_id_seq'::regclass)
;
ALTER TABLE ONLY public.sources ALTER COLUMN id SET DEFAULT nextval('public.sources_id_seq'::regclass)
;
ALTER TABLE ONLY public.tasks ALTER COLUMN id SET DEFAULT nextval('public.tasks_id_seq'::regclass)
;
ALTER TABLE ONLY public.trials ALTER COLUMN id SET DEFAULT nextval('public.trials_id_seq'::regclass)
;
ALTER TABLE ONLY public.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
;
ALTER TABLE ONLY public.conflicts
    ADD CONSTRAINT pk_conflicts PRIMARY KEY (id)
;
ALTER TABLE ONLY public.conversation_turns
    ADD CONSTRAINT pk_conversation_turns PRIMARY KEY (conversation_id, idx)
;
ALTER TABLE ONLY public.conversations
    ADD CONSTRAINT pk_conversations PRIMARY KEY (id)
;
ALTER TABLE ONLY public.episode_loads
    ADD CONSTRAINT pk_episode_loads PRIMARY KEY (load_id, row_number)
;
ALTER TABLE ONLY public.episodes
    ADD CONSTRAINT pk_episodes PRIMARY KEY (id)
;
ALTER TABLE ONLY public.loads
    ADD CONSTRAINT pk_loads PRIMARY KEY (id)
;
ALTER TABLE ONLY public.messages
    ADD CONSTRAINT pk_messages PRIMARY KEY (id)
;
ALTER TABLE ONLY public.run_labels
    ADD CONSTRAINT pk_run_labels PRIMARY KEY (run_id, key)
;
ALTER TABLE ONLY public.run_sources
    ADD CONSTRAINT pk_run_sources PRIMARY KEY (run_id, source_id)
;
ALTER TABLE ONLY public.run_task_breakdown
    ADD CONSTRAINT pk_run_task_breakdown PRIMARY KEY (id)
;
ALTER TABLE ONLY public.run_task_outcomes
    ADD CONSTRAINT pk_run_task_outcomes PRIMARY KEY (id)
;
ALTER TABLE ONLY public.runs
    ADD CONSTRAINT pk_runs PRIMARY KEY (id)
;
ALTER TABLE ONLY public.sources
    ADD CONSTRAINT pk_sources PRIMARY KEY (id)
;
ALTER TABLE ONLY public.tasks
    ADD CONSTRAINT pk_tasks PRIMARY KEY (id)
;
ALTER TABLE ONLY public.trial_lengths
    ADD CONSTRAINT pk_trial_lengths PRIMARY KEY (trial_id)
;
ALTER TABLE ONLY public.trial_loads
    ADD CONSTRAINT pk_trial_loads PRIMARY KEY (trial_id, load_id)
;
ALTER TABLE ONLY public.trials
    ADD CONSTRAINT pk_trials PRIMARY KEY (id)
;
ALTER TABLE ONLY public.episodes
    ADD CONSTRAINT uq_episodes_trial_id_trace_source_episode_index UNIQUE (trial_id, trace_source, episode_index)
;
ALTER TABLE ONLY public.loads
    ADD CONSTRAINT uq_loads_source_id_unit_content_hash UNIQUE (source_id, unit, content_hash)
;
ALTER TABLE ONLY public.messages
    ADD CONSTRAINT uq_messages_content_hash UNIQUE (content_hash)
;
ALTER TABLE ONLY public.run_task_outcomes
    ADD CONSTRAINT uq_run_task_outcomes_run_id_task_id UNIQUE (run_id, task_id)
;
ALTER TABLE ONLY public.runs
    ADD CONSTRAINT uq_runs_run_key UNIQUE (run_key)
;
ALTER TABLE ONLY public.sources
    ADD CONSTRAINT uq_sources_kind_uri UNIQUE (kind, uri)
;
ALTER TABLE ONLY public.tasks
    ADD CONSTRAINT uq_tasks_name UNIQUE (name)
;
ALTER TABLE ONLY public.trials
    ADD CONSTRAINT uq_trials_run_id_trial_name UNIQUE (run_id, trial_name)
;
CREATE INDEX ix_conflicts_load_id ON public.conflicts USING btree (load_id)
;
CREATE INDEX ix_conversation_turns_message_id ON public.conversation_turns USING btree (message_id)
;
CREATE INDEX ix_conversations_trial_id ON public.conversations USING btree (trial_id)
;
CREATE INDEX ix_episode_loads_episode_id ON public.episode_loads USING btree (episode_id)
;
CREATE INDEX ix_episodes_conversation_id_n_turns ON public.episodes USING btree (conversation_id, n_turns)
;
CREATE INDEX ix_run_labels_key_value ON public.run_labels USING btree (key, value)
;
CREATE INDEX ix_run_task_breakdown_failures ON public.run_task_breakdown USING btree (exception_type, run_id, task_id, n_trials)
;
CREATE INDEX ix_run_task_breakdown_groups ON public.run_task_breakdown USING btree (run_id, agent, model, exception_type, n_trials, n_successes, n_rewards, reward_sum)
;
CREATE INDEX ix_run_task_breakdown_run_id_task_id ON public.run_task_breakdown USING btree (run_id, task_id)
;
CREATE INDEX ix_run_task_outcomes_by_task ON public.run_task_outcomes USING btree (task_id, run_id, n_trials, n_successes)
;
CREATE INDEX ix_trial_lengths_run_id_chars ON public.trial_lengths USING btree (run_id, chars) WHERE (chars IS NOT NULL)
;
CREATE INDEX ix_trial_lengths_run_id_input_tokens ON public.trial_lengths USING btree (run_id, input_tokens) WHERE (input_tokens IS NOT NULL)
;
CREATE INDEX ix_trial_lengths_run_id_output_tokens ON public.trial_lengths USING btree (run_id, output_tokens) WHERE (output_tokens IS NOT NULL)
;
CREATE INDEX ix_trial_lengths_run_id_turns ON public.trial_lengths USING btree (run_id, turns) WHERE (turns IS NOT NULL)
;
CREATE INDEX ix_trial_loads_load_id ON public.trial_loads USING btree (load_id)
;
CREATE INDEX ix_trials_instruction_id ON public.trials USING btree (instruction_id)
;
CREATE INDEX ix_trials_outcomes ON public.trials USING btree (run_id, task_id, reward, exception_type, status, agent, model, started_at)
;
CREATE INDEX ix_trials_task_id ON public.trials USING btree (task_id)
;
ALTER TABLE ONLY public.conflicts
    ADD CONSTRAINT fk_conflicts_load_id_loads FOREIGN KEY (load_id) REFERENCES public.loads(id)
;
ALTER TABLE ONLY public.loads
    ADD CONSTRAINT fk_loads_source_id_sources FOREIGN KEY (source_id) REFERENCES public.sources(id)
;
ALTER TABLE ONLY public.run_labels
    ADD CONSTRAINT fk_run_labels_run_id_runs FOREIGN KEY (run_id) REFERENCES public.runs(id)
;
INSERT INTO alembic_version (version_num) VALUES ('0016')
;
