"""The store: tuned results, where they live, and which config a call gets.

    keys.py       a tuned record's key (family, shape, op, dtype) and the problem it stands for
    records.py    the JSON files: metadata and records, checked on load, merged atomically on save
    locations.py  the folders: where `autogemm tune` writes, what ships with autogemm, the cache
    lookup.py     the choice for a call: tuned, stale, nearest or default, and nothing else decides it

It imports the runtime (a record's config is checked against its family's space) and no layer above.
"""
