"""fmest-cost-cloud: a quoted cloud price table and the dollar cost of a training run.

The plugin (entry point ``cost_cloud`` -> :mod:`fmest_cost_cloud.plugin`) registers the rows of
``prices.csv`` through ``fmest_register_prices``, answers ``fmest_estimate_cost`` and adds the
``fmest prices`` command. See docs/cost.md.
"""

__version__ = "0.1.0"
#: ``fmest prices``'s one-line help (here, so listing the command loads none of its code)
PRICES_HELP = "list cloud GPU prices (provider, instance, $/GPU-h, $/instance-h, observed date)"
