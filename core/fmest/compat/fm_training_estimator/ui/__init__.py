"""``fm_training_estimator.ui``: the flat-config answer (:mod:`.core`), the CLI (:mod:`.cli`)
and the REST route (:mod:`.api`)."""
