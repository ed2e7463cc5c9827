"""What a chapter's sections share, one module per chapter: example data several sections use, and
the models one section trains and later ones load (through :mod:`transformer_lib.book.cache`).

    masking     chapter 2: the two-sentence German-English batch every section masks
    embeddings  chapter 3: eight caption pairs, their vocabularies and a padded batch
    training    chapter 5: the reverse task and its vocabulary, as the trainer makes them
    decoding    chapter 6: the trained reverse model and the translation model
    beyond      chapter 7: the caption corpus and the caption language model
    inspect     chapters 1 to 4: their mechanisms measured on the shipped trained model

A section imports what it needs from its chapter's module (``from
transformer_lib.book.chapters.masking import example_batch``); nothing here is imported by the model.
"""
