"""Stack output names: elasticctr_common.stack_outputs, which the client CLI reads too."""

from elasticctr_common.stack_outputs import *  # noqa: F403 (the names, re-exported)
