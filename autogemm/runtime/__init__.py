"""The runtime: what turns a family's config into a kernel that runs.

    device.py   the GPU's facts (DeviceInfo; the H100 stands in where there is none)
    family.py   the kernel-family contract: a template, its declared space, constraints, rendering
    render.py   Jinja, and the code hash that tells a stale tuned record
    compile.py  NVRTC through CuPy, cached per source

It imports nothing else of autogemm but `errors`: the store, the ops and the tuning tools build on it.
"""
