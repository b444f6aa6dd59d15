SET 'execution.checkpointing.mode' = 'AT_LEAST_ONCE'; SET 'execution.checkpointing.unaligned.enabled' = 'true'
