"""elasticctr's policy pack (pulumi_policy): the guard rails no change may quietly break.

`__main__.py` assembles the pack; each module holds one rule or a small group of them, one
validator function per rule. docs/review.md says how to run the pack and how to add a rule.
"""
