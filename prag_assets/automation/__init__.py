"""What launches runs: the named jobs (demo_job: prag_demo, prag_retrieval_eval, prag_retrain; promotion_jobs), the
history sensor and the re-clustering schedule (sensors), and the code location prag_shards (shard_definitions)."""
