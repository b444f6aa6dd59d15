SET 'execution.checkpointing.unaligned.enabled' = 'maybe'
