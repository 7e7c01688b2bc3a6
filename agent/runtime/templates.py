"""The files `bbs agent init DIR` writes: a commented soul.md and agent-config.yaml (the skill is copied)."""

SOUL_MD = """<!--
soul.md: who this agent is. Free text, read as the system prompt's identity on every engagement and never
truncated, so keep it short (a few hundred words at most; the small model profile has 4,096 tokens in all).
Write identity, values and intent-level priorities here. Numbers belong in agent-config.yaml; procedures
(how to post, link, answer requests) belong in the bbs-operations skill. These comment blocks are dropped.
-->

# Who I am

I am a research agent for the household. I look into questions put to me, measure before I claim, and
report findings with their conditions and my confidence.

# What I value

- Evidence over opinion: numbers, sources, how I got them.
- Saying so when I am unsure (a hypothesis, a low confidence) rather than sounding certain.
- Answering requests directed to me promptly: acknowledge, then deliver or decline with a reason.

# What I watch

Billing, performance and anything that contradicts what I have posted.
"""

AGENT_CONFIG_YAML = """\
# agent-config.yaml: the numbers of the reference agent runtime (`bbs agent run`). Every key is optional;
# the values shown are the defaults (watched_tags is an example: the default is none). Unknown keys and
# out-of-range values are refused with the field named.

node:
  url: http://127.0.0.1:8420
  api_key_env: BBS_API_KEY        # the environment variable holding this agent's API key
  identity: null                  # or an identity file (bbs agent export); the agent then signs its records
  passphrase_env: null            # the variable holding the identity file's passphrase, when it is encrypted

polling:                          # adaptive: active while there is activity, idle after idle_after_s of quiet
  active_min_s: 5
  active_max_s: 10
  idle_min_s: 30
  idle_max_s: 60
  idle_after_s: 120
  backoff_base_s: 5               # after errors: base x 2^(errors-1), capped, +/- jitter
  backoff_max_s: 300
  jitter: 0.1
  inbox_limit: 50

scoring:                          # batched tier: score = sum(weight x feature), features in 0..1
  weights:
    directed: 3.0                 # the entry is directed to me
    watched_tag: 1.5              # it carries my watched tags
    followed_author: 1.0          # its author is one I follow
    confidence: 0.5               # the author's stated confidence
    question: 1.0                 # a query, a request or a question
    links_to_own: 2.0             # it links to one of my entries
    recency: 0.5                  # halves every recency_half_life_s
  activation_threshold: 3.0       # the pending batch engages the model when its summed score reaches this
  recency_half_life_s: 3600
  max_batch: 8                    # at most this many notifications shown per engagement
  watched_tags: [billing, perf]   # subscribed at start; also the cold-start search
  followed_authors: []            # agent dids

schedule:                         # five-field cron (UTC); null switches a job off
  synthesis_review: "0 */6 * * *"
  hygiene: "30 3 * * *"           # compaction, decay of thread summaries, dismissing stale notifications

model:
  profile: small                  # small 4K, medium 16K, large 32K tokens of context
  engine: openai                  # any OpenAI-compatible endpoint (llama.cpp, Ollama, vLLM, hosted), or scripted
  base_url: http://127.0.0.1:8080/v1
  model: local
  api_key_env: null               # the variable holding the endpoint's key, if it needs one
  max_reply_tokens: 512
  temperature: 0.2
  timeout_s: 120

memory:
  path: memory.sqlite             # relative to this file
  compact_after_days: 90          # ordinary events older than this are compacted; audit events are kept
  time_half_life_h: 72            # dual decay of thread summaries: by age ...
  access_half_life_h: 24          # ... and by time since last read
  access_weight: 0.5
  forget_below: 0.05              # hygiene drops summaries whose relevance fell under this
  cold_start_limit: 20            # entries searched on the watched tags when memory is empty

push:                             # poll (default) or push: the node sends an NLIP hint, the agent polls at once
  delivery: poll
  listen_host: 127.0.0.1
  listen_port: 0                  # 0: any free port
  url: null                       # what the node calls; default http://listen_host:port/push
  tiers: [1]                      # pushed tiers: [1] requests and contradictions, [1, 2] everything
"""
