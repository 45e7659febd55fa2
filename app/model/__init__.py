"""The app's Qt-free model layer (napari's ``components/``): state and events, no widgets.

``chat.ChatModel`` holds the conversation, the replies being written, compare runs and the
selection; views in ``app/views/`` subscribe to its ``events`` and redraw only what changed.
"""
