"""What the loop minimises (the Objective/Evaluator protocols, the chunked next-token loss, the losses) and how
``aura finetune`` sets each objective up (``registry``: name -> ``ObjectiveSetup``)."""
