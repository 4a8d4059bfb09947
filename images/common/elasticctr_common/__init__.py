"""Code shared by every elasticctr workload image: storage URIs, slot.conf, model versions."""
