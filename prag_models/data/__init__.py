"""Data sources: LaMP files, demo worlds, PersonaBench, LongMemEval, histories, consent (above config, storage)."""
