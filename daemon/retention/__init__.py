"""The retention terms: ways out of forgetting beyond replay, each a term the step adds to the loss of a
run from a seed checkpoint (TATU_SEED_CKPT; "seed" here is that checkpoint, never TATU_SEED, the random seed):

    anchor.py   stay near the seed: L2-SP (lambda/2 sum (theta - theta_seed)^2) or EWC (weighted by F)
    fisher.py   EWC's F: the seed's diagonal Fisher on the replay channel, its file and its summary
    distill.py  distill the seed (LwF): alpha T^2 KL(p_seed/T || p_model/T) per target token
    spec.py     the variables checked together (pure Python: 78 before torch loads)
    setup.py    the run's terms from its config: built at the start, checked on a restart, described

The Trainer (daemon/trainer.py) calls them; nothing here logs or touches the run's RNG or stream.
"""
