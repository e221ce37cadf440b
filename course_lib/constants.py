"""Grain's `grain.constants`: the names of the meta features of Grain's first pipelines.

Grain's early, TensorFlow-based pipelines added features to each element under these keys
(its index, its record key, its epoch, its seed...). Grain 0.2.18 still exports the names,
with these values, and nothing in it reads them; course_lib defines them the same way so
that code which imports them runs, and reads none either. What they named comes from
elsewhere here: a record's position and key are `RecordMetadata.index` and `.record_key`
(the sampler's), an element's position is what `map_with_index` passes, and a random step's
seed is its own (`randomness.py`).
"""

INDEX = "_index"
RECORD_KEY = "_record_key"
DATASET_INDEX = "_dataset_index"
EPOCH = "_epoch"
SEED = "_seed"
RECORD = "_record"
META_FEATURES = frozenset([INDEX, RECORD_KEY, DATASET_INDEX, EPOCH, SEED, RECORD])

__all__ = ["DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED"]
