"""What the loop minimises: the Objective/Evaluator protocols, the chunked next-token loss, DPO/ORPO."""
