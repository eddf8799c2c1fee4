"""Privacy tests (issue 17): consent and visibility, one way to other users' documents, forgetting."""
