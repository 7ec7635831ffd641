"""ART-E: an agent that answers questions about an email inbox by searching it over MCP.

- `inbox`: a deterministic generator of inboxes (people, threads, attachments, facts spread over
  several messages) with questions whose answers and source emails are known; SQLite + FTS5.
- `server.py`: the MCP server over one inbox (`search_emails`, `read_email`, `return_final_answer`).
- `reward`: ART-E's reward, checked in code.
- `rollout`: the agent loop on an `art_mcp` session.
- `teacher`: a scripted teacher that writes SFT trajectories as JSONL.
- `train`: SFT warm-up, then RL on the same LoRA, evaluated on held-out inboxes.

Run the scripts as modules from the repository root: ``python -m examples.art_e.train``.
"""
