"""Conversation memory: each session's turns, their archive, the conversation log."""
